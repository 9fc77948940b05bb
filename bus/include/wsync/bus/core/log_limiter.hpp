#pragma once
// A limit on the log lines clients can cause (a refused request, a reply that could not be sent): at most
// linesPerInterval lines per key (a kind of line and the client's routing id, "send:<routing id>") in each
// interval; the rest cost a counter increment and no formatting, and when the interval ends one summary line says
// how many were left out:
//
//   warn  ... | 290,076 more like it from send:worker-3 in the last 10 s (suppressed)
//
// A key's interval starts with its first line. Its summary is written by the next line for that key after the
// interval, or by flush(now), which the owner calls about once a second so that a client that went quiet still
// gets its summary; either way the key is then forgotten, so clients that stopped cost no memory.
//
// Memory stays bounded whatever the number of clients (a hostile one gets a new routing id with each connection):
// at most maxTrackedKeys keys are tracked, and the lines of keys beyond them share one "other clients" key, so the
// lines written per interval stay bounded too: (maxTrackedKeys + 1) * linesPerInterval.
//
// Time is passed in, so that tests step it. Lines go through wsync's logger (log.hpp); a line its level filters
// out is neither written nor counted. Keys may hold any bytes (a routing id): summaries print them made printable.
//
// Threading: not synchronised; one thread uses a limiter (the coordinator's loop thread).
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <spdlog/common.h>

namespace wsync::bus {

// Enough lines to show what a client does wrong, few enough that a client refused in a loop cannot fill the log.
inline constexpr std::size_t kLimitedLinesPerInterval = 5;
// Long enough that a flood costs a handful of lines, short enough that a new problem shows within seconds.
inline constexpr std::chrono::seconds kLimitInterval{10};
// Four times the agent slots of a bus (kMaxAgents = 256): every agent, monitor and tool of a full bus, with room.
inline constexpr std::size_t kMaxLimitedKeys = 1024;

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    std::size_t linesPerInterval = kLimitedLinesPerInterval;
    Clock::duration interval = kLimitInterval;
    std::size_t maxTrackedKeys = kMaxLimitedKeys;
  };

  // The key that keys beyond maxTrackedKeys share, as summaries name it.
  static constexpr std::string_view kOtherClients = "other clients";

  LogLimiter() : LogLimiter(Limits{}) {}
  explicit LogLimiter(const Limits& limits) : limits_(limits) {}

  // Writes makeText() at `level` unless `key` has had its lines in this interval; makeText is not called then.
  template <std::invocable MakeText>
  void log(spdlog::level::level_enum level, std::string_view key, Clock::time_point now, MakeText&& makeText) {
    if (admit(level, key, now)) write(level, std::string_view(std::forward<MakeText>(makeText)()));
  }
  template <std::invocable MakeText>
  void info(std::string_view key, Clock::time_point now, MakeText&& makeText) {
    log(spdlog::level::info, key, now, std::forward<MakeText>(makeText));
  }
  template <std::invocable MakeText>
  void warn(std::string_view key, Clock::time_point now, MakeText&& makeText) {
    log(spdlog::level::warn, key, now, std::forward<MakeText>(makeText));
  }
  template <std::invocable MakeText>
  void error(std::string_view key, Clock::time_point now, MakeText&& makeText) {
    log(spdlog::level::err, key, now, std::forward<MakeText>(makeText));
  }

  // Writes the summaries of the intervals that ended by `now` and forgets their keys.
  void flush(Clock::time_point now);

  // Keys with an interval in progress, the shared one included.
  std::size_t trackedKeys() const { return windows_.size() + (otherClients_ ? 1 : 0); }

 private:
  struct Window {
    Clock::time_point start;
    std::uint64_t written = 0;
    std::uint64_t suppressed = 0;
    spdlog::level::level_enum level = spdlog::level::trace;  // the highest of the suppressed lines
  };

  // Whether this line may be written; counts it either way, after summarising the key's interval if it ended.
  bool admit(spdlog::level::level_enum level, std::string_view key, Clock::time_point now);
  // Whether `window`'s interval ended by `now`, summarised if it suppressed anything: then it is to be forgotten.
  bool endIfOver(const Window& window, std::string_view key, Clock::time_point now) const;
  static void write(spdlog::level::level_enum level, std::string_view text);

  Limits limits_;
  std::unordered_map<std::string, Window> windows_;
  std::optional<Window> otherClients_;
  std::string lookup_;  // the key being looked up, kept so that its buffer is reused
};

}  // namespace wsync::bus
