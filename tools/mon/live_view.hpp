#pragma once
// The terminal view of `wsync-mon`: the bus, its agents and the rounds, as text for one frame.
#include <chrono>
#include <string>

#include "bus_state.hpp"

namespace wsync::mon {

std::string renderView(const BusState& state, const std::string& busName, std::chrono::steady_clock::time_point now);

}  // namespace wsync::mon
