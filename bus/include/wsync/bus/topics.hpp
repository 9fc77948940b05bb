#pragma once
// Topic prefixes of the coordinator's event stream. A subscriber filters by prefix; the full topic names the
// event ("round/pause"), so a monitor can subscribe to everything with "".
#include <string_view>

namespace wsync::bus::topics {

inline constexpr std::string_view kRound = "round/";  // begin, pause, plan, commit, abort, resume
inline constexpr std::string_view kAgent = "agent/";  // joined, left, dead
inline constexpr std::string_view kBus = "bus/";      // coordinator start and stop

}  // namespace wsync::bus::topics
