#pragma once
// The logging flags of every wsync program (log.hpp): --log-level and --log-format, with WSYNC_LOG_LEVEL as the
// level's default so a whole launch script can turn on debug lines at once.
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "wsync/bus/core/log.hpp"

namespace wsync::cli {

class LogFlags {
 public:
  LogFlags() {
    if (const char* level = std::getenv("WSYNC_LOG_LEVEL"); level != nullptr && log::parseLevel(level)) level_ = level;
  }

  void addTo(CLI::App& app) {
    levelOption_ =
        app.add_option("--log-level", level_, "trace, debug, info, warn, error, critical or off (env WSYNC_LOG_LEVEL)")
            ->capture_default_str()
            ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
    app.add_option("--log-format", format_, "text, or json: one object per line")
        ->capture_default_str()
        ->check(CLI::IsMember({"text", "json"}));
  }

  // Whether --log-level was on the command line (a program's own -q gives way to it).
  bool levelGiven() const { return levelOption_ != nullptr && levelOption_->count() > 0; }

  // After parsing: makes wsync's logger write this program's lines with the flags given.
  void apply(const std::string& program) const {
    log::configure(
        log::Options{.program = program, .level = *log::parseLevel(level_), .format = *log::parseFormat(format_)});
  }

 private:
  std::string level_ = "info";
  std::string format_ = "text";
  CLI::Option* levelOption_ = nullptr;
};

}  // namespace wsync::cli
