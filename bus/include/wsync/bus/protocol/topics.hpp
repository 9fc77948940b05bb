#pragma once
// Topic prefixes of the coordinator's event stream. A subscriber filters by prefix; the full topic names the
// event ("round/pause"), so a monitor can subscribe to everything with "".
#include <string>
#include <string_view>

namespace wsync::bus::topics {

// Events are numbered per family, the topic up to and including its first '/' ("round/" for "round/pause"), so a
// subscriber filtering by family sees consecutive numbers and can tell a drop from a filtered-out event.
constexpr std::string_view familyOf(std::string_view topic) {
  const std::size_t slash = topic.find('/');
  return slash == std::string_view::npos ? topic : topic.substr(0, slash + 1);
}

inline constexpr std::string_view kRound = "round/";  // begin, pause, plan, commit, abort, resume
inline constexpr std::string_view kAgent = "agent/";  // joined, left, dead
inline constexpr std::string_view kBus = "bus/";      // beat: the coordinator, every heartbeat interval

// The topic of an event in `family` named by a schema enum ("round/" and "Commit" -> "round/commit").
inline std::string topicOf(std::string_view family, std::string_view name) {
  std::string topic(family);
  for (const char c : name) topic.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  return topic;
}

}  // namespace wsync::bus::topics
