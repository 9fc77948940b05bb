#include "wsync/bus/core/log.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/log_sink.hpp"

namespace wsync::log {
namespace {

constexpr std::string_view kEraseLine = "\r\033[K";  // back to column 0, clear to the end of the line

struct Identity {
  std::mutex mutex;
  std::string agent;  // under mutex
  std::atomic<std::uint64_t> version{0};
};

Identity& identity() {
  static Identity instance;
  return instance;
}

struct Current {
  std::mutex mutex;
  std::shared_ptr<spdlog::logger> logger;        // under mutex
  std::shared_ptr<detail::StderrLineSink> sink;  // under mutex; null when the logger is the embedder's
};

Current& current() {
  static Current instance;
  return instance;
}

constexpr std::array<std::string_view, 7> kLevelNames = {"trace", "debug", "info", "warn", "error", "critical", "off"};

std::string_view levelName(spdlog::level::level_enum level) {
  const auto index = static_cast<std::size_t>(level);
  return index < kLevelNames.size() ? kLevelNames[index] : "?";
}

// UTC with milliseconds, so lines from several hosts sort together.
std::string timestamp(spdlog::log_clock::time_point time) {
  const auto sinceEpoch = time.time_since_epoch();
  const std::time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(sinceEpoch).count();
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(sinceEpoch).count() % 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  const std::size_t length = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + length, sizeof text - length, ".%03dZ", static_cast<int>(millis));
  return text;
}

std::shared_ptr<spdlog::logger> makeLogger(const Options& options) {
  auto sink = std::make_shared<detail::StderrLineSink>(options.program, options.format);
  auto logger = std::make_shared<spdlog::logger>("wsync", sink);
  logger->set_level(options.level);
  // Errors are rare and must not sit in a buffer when the process dies right after.
  logger->flush_on(spdlog::level::warn);
  Current& state = current();
  state.sink = sink;
  return logger;
}

Options defaultOptions() {
  Options options;
  if (const char* level = std::getenv("WSYNC_LOG_LEVEL")) {
    if (auto parsed = parseLevel(level)) options.level = *parsed;
  }
  return options;
}

}  // namespace

namespace detail {

StderrLineSink::StderrLineSink(std::string program, Format format)
    : program_(std::move(program)), format_(format), terminal_(::isatty(STDERR_FILENO) == 1) {}

std::string StderrLineSink::formatLine(const spdlog::details::log_msg& message) const {
  const std::string_view text(message.payload.data(), message.payload.size());
  std::string agent;
  {
    Identity& who = identity();
    const std::lock_guard lock(who.mutex);
    agent = who.agent.empty() ? "-" : who.agent;
  }
  const std::uint64_t version = identity().version.load(std::memory_order_relaxed);
  if (format_ == Format::Json) {
    nlohmann::ordered_json line;
    line["time"] = timestamp(message.time);
    line["level"] = levelName(message.level);
    line["program"] = program_;
    line["agent"] = agent;
    line["version"] = version;
    line["msg"] = text;
    // Replace, not throw, on bytes that are not UTF-8: a tensor name from a file must not take a log line down.
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
  }
  char level[8];
  std::snprintf(level, sizeof level, "%-5s", std::string(levelName(message.level)).c_str());
  std::string line = timestamp(message.time);
  line += ' ';
  line += level;
  line += ' ';
  line += program_;
  line += " agent=" + agent + " version=" + std::to_string(version) + " | ";
  line += text;
  line += '\n';
  return line;
}

void StderrLineSink::sink_it_(const spdlog::details::log_msg& message) {
  const std::string line = formatLine(message);
  std::string out;
  if (!status_.empty()) out += kEraseLine;
  out += line;
  if (!status_.empty()) out += status_;
  std::fwrite(out.data(), 1, out.size(), stderr);
}

bool StderrLineSink::showStatus(const std::string& line) {
  if (!terminal_) return false;
  const std::lock_guard lock(mutex_);
  status_ = line;
  std::string out(kEraseLine);
  out += line;
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
  return true;
}

void StderrLineSink::clearStatus() {
  const std::lock_guard lock(mutex_);
  if (status_.empty()) return;
  status_.clear();
  std::fwrite(kEraseLine.data(), 1, kEraseLine.size(), stderr);
  std::fflush(stderr);
}

std::shared_ptr<StderrLineSink> currentSink() {
  (void)logger();  // makes the default logger if nothing was configured yet
  Current& state = current();
  const std::lock_guard lock(state.mutex);
  return state.sink;
}

}  // namespace detail

void configure(const Options& options) {
  Current& state = current();
  const std::lock_guard lock(state.mutex);
  state.logger = makeLogger(options);
}

void setLogger(std::shared_ptr<spdlog::logger> logger) {
  Current& state = current();
  const std::lock_guard lock(state.mutex);
  state.logger = std::move(logger);
  state.sink = nullptr;
}

std::shared_ptr<spdlog::logger> logger() {
  Current& state = current();
  const std::lock_guard lock(state.mutex);
  if (!state.logger) state.logger = makeLogger(defaultOptions());
  return state.logger;
}

bool showStatusLine(const std::string& line) {
  const auto sink = detail::currentSink();
  return sink && sink->showStatus(line);
}

void clearStatusLine() {
  if (const auto sink = detail::currentSink()) sink->clearStatus();
}

void setAgent(std::string_view agentId) {
  Identity& who = identity();
  const std::lock_guard lock(who.mutex);
  who.agent = agentId;
}

void setVersion(std::uint64_t version) { identity().version.store(version, std::memory_order_relaxed); }

tl::expected<spdlog::level::level_enum, std::string> parseLevel(std::string_view name) {
  for (std::size_t index = 0; index < kLevelNames.size(); ++index) {
    if (name == kLevelNames[index]) return static_cast<spdlog::level::level_enum>(index);
  }
  return tl::unexpected("unknown log level '" + std::string(name) +
                        "' (use trace, debug, info, warn, error, critical or off)");
}

tl::expected<Format, std::string> parseFormat(std::string_view name) {
  if (name == "text") return Format::Text;
  if (name == "json") return Format::Json;
  return tl::unexpected("unknown log format '" + std::string(name) + "' (use text or json)");
}

}  // namespace wsync::log
