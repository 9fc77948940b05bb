#include "wsync/bus/core/log_limiter.hpp"

#include <algorithm>

#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/client_text.hpp"

namespace wsync::bus {
namespace {

// 290076 -> "290,076": summaries count floods, which are read at a glance.
std::string groupThousands(std::uint64_t value) {
  std::string digits = std::to_string(value);
  for (std::size_t at = digits.size(); at > 3;) {
    at -= 3;
    digits.insert(at, 1, ',');
  }
  return digits;
}

std::string describeInterval(LogLimiter::Clock::duration interval) {
  using std::chrono::duration_cast;
  if (interval % std::chrono::seconds(1) == LogLimiter::Clock::duration::zero()) {
    return std::to_string(duration_cast<std::chrono::seconds>(interval).count()) + " s";
  }
  return std::to_string(duration_cast<std::chrono::milliseconds>(interval).count()) + " ms";
}

}  // namespace

void LogLimiter::write(spdlog::level::level_enum level, std::string_view text) {
  log::logger()->log(level, spdlog::string_view_t(text.data(), text.size()));
}

bool LogLimiter::endIfOver(const Window& window, std::string_view key, Clock::time_point now) const {
  if (now - window.start < limits_.interval) return false;
  if (window.suppressed > 0) {
    write(window.level, groupThousands(window.suppressed) + " more like it from " + printableText(key) +
                            " in the last " + describeInterval(limits_.interval) + " (suppressed)");
  }
  return true;
}

bool LogLimiter::admit(spdlog::level::level_enum level, std::string_view key, Clock::time_point now) {
  if (!log::logger()->should_log(level)) return false;
  lookup_.assign(key);
  Window* window = nullptr;
  if (auto found = windows_.find(lookup_); found != windows_.end()) {
    window = &found->second;
    if (endIfOver(*window, key, now)) *window = Window{.start = now};
  } else if (windows_.size() < limits_.maxTrackedKeys) {
    window = &windows_.emplace(lookup_, Window{.start = now}).first->second;
  } else {
    if (otherClients_ && endIfOver(*otherClients_, kOtherClients, now)) otherClients_.reset();
    if (!otherClients_) otherClients_ = Window{.start = now};
    window = &*otherClients_;
  }
  if (window->written < limits_.linesPerInterval) {
    ++window->written;
    return true;
  }
  ++window->suppressed;
  window->level = std::max(window->level, level);
  return false;
}

void LogLimiter::flush(Clock::time_point now) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    it = endIfOver(it->second, it->first, now) ? windows_.erase(it) : std::next(it);
  }
  if (otherClients_ && endIfOver(*otherClients_, kOtherClients, now)) otherClients_.reset();
}

}  // namespace wsync::bus
