#pragma once
// Structured logs for every wsync process, through spdlog: one logger, levels, and on every line the program, the
// agent's id and the weight version the process holds (a worker's applied version, a trainer's last committed one,
// the coordinator's committed one), as text or as one JSON object per line (`--log-format json`).
//
//   2026-11-22T10:15:02.318Z info  wsync-worker agent=worker-1 version=12 | version 13 applied (round 13)
//   {"time":"2026-11-22T10:15:02.318Z","level":"info","program":"wsync-worker","agent":"worker-1",
//    "version":13,"msg":"..."}
//
// Lines go to stderr. On a terminal a status line (a progress bar) can sit under them: each log
// line is printed above it, and it is redrawn after (showStatusLine). A program embedding an agent can route wsync's
// lines into its own spdlog setup with setLogger().
//
// Threading: every function may be called from any thread.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <spdlog/logger.h>
#include <tl/expected.hpp>

namespace wsync::log {

enum class Format : std::uint8_t { Text, Json };

struct Options {
  std::string program = "wsync";  // the program's name, the first field of every line
  spdlog::level::level_enum level = spdlog::level::info;
  Format format = Format::Text;
};

// Makes wsync's logger write to stderr with these options. Called by the programs at start; a process that never
// calls it logs text at the level of the WSYNC_LOG_LEVEL environment variable (default info).
void configure(const Options& options);
// Replaces wsync's logger by the embedding program's own (its sinks and pattern; agent and version are then not
// added by wsync).
void setLogger(std::shared_ptr<spdlog::logger> logger);
std::shared_ptr<spdlog::logger> logger();

// Who is logging: the id of the agent this process runs ("coordinator" for a coordinator) and the version it
// holds. The agents set them themselves when they join and whenever their version changes.
void setAgent(std::string_view agentId);
void setVersion(std::uint64_t version);

// A status line under the log lines (progress_bar.hpp draws one), redrawn in place. Drawn only where stderr is a
// terminal and the logger is wsync's own; returns false (and draws nothing) elsewhere.
bool showStatusLine(const std::string& line);
void clearStatusLine();

// "trace", "debug", "info", "warn", "error" or "off"; "text" or "json".
tl::expected<spdlog::level::level_enum, std::string> parseLevel(std::string_view name);
tl::expected<Format, std::string> parseFormat(std::string_view name);

template <typename... Args>
void debug(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger()->debug(format, std::forward<Args>(args)...);
}
template <typename... Args>
void info(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger()->info(format, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger()->warn(format, std::forward<Args>(args)...);
}
template <typename... Args>
void error(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger()->error(format, std::forward<Args>(args)...);
}

}  // namespace wsync::log
