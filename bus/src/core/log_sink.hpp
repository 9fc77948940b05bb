#pragma once
// The sink behind wsync's logger (log.hpp): formats each line itself (text or JSON, with the program, agent and
// version) and writes it to stderr, keeping a status line (showStatusLine) under the lines on a terminal.
#include <cstdio>
#include <string>

#include <spdlog/sinks/base_sink.h>

#include "wsync/bus/core/log.hpp"

namespace wsync::log::detail {

class StderrLineSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  StderrLineSink(std::string program, Format format);

  // The status line: shown only where stderr is a terminal (returns false elsewhere, and draws nothing).
  bool showStatus(const std::string& line);
  void clearStatus();

 private:
  void sink_it_(const spdlog::details::log_msg& message) override;
  void flush_() override { std::fflush(stderr); }
  std::string formatLine(const spdlog::details::log_msg& message) const;

  const std::string program_;
  const Format format_;
  const bool terminal_;
  std::string status_;  // under mutex_; empty: none shown
};

// The sink of the logger configure() made; null after setLogger() or before any logging.
std::shared_ptr<StderrLineSink> currentSink();

}  // namespace wsync::log::detail
