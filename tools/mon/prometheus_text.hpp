#pragma once
// The monitor's metrics in the Prometheus text exposition format (version 0.0.4), as `wsync-mon --prometheus`
// serves them on /metrics. Counters count from the monitor's start.
#include <chrono>
#include <string>

#include "bus_state.hpp"

namespace wsync::mon {

std::string prometheusText(const BusState& state, const std::string& busName,
                           std::chrono::steady_clock::time_point now);

}  // namespace wsync::mon
