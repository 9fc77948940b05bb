#include "round_reporter.hpp"

#include <cinttypes>
#include <cstdio>

namespace wsync::demo {

namespace {

double millisBetween(std::uint64_t fromNs, std::uint64_t toNs) {
  return fromNs != 0 && toNs >= fromNs ? static_cast<double>(toNs - fromNs) / 1e6 : 0.0;
}

}  // namespace

std::optional<RoundReport> RoundReporter::onEvent(std::string_view topic, const bus::Message& message) {
  const std::uint64_t at = message.envelope().sent_at_ns();
  if (const auto* transition = message.as<msg::RoundTransition>()) {
    if (transition->round() != current_.round) {
      current_ = RoundReport{};
      stamps_ = Stamps{};
      current_.round = transition->round();
      current_.version = transition->version();
    }
    current_.workers = transition->participants();
    transfer_.reset();
    if (transition->phase() == msg::RoundPhase::Transfer) {
      transfer_ = TransferInProgress{transition->round(), transition->version(), transition->total_bytes()};
    }
    switch (transition->phase()) {
      case msg::RoundPhase::Begin:
        stamps_.begin = at;
        break;
      case msg::RoundPhase::Pause:
        stamps_.pause = at;
        break;
      case msg::RoundPhase::Transfer:
        stamps_.transfer = at;
        break;
      case msg::RoundPhase::Verify:
        stamps_.verify = at;
        break;
      case msg::RoundPhase::Resume:
        stamps_.resume = at;
        break;
      case msg::RoundPhase::Idle: {
        current_.pauseMs = millisBetween(stamps_.pause, stamps_.resume);
        current_.transferMs = millisBetween(stamps_.transfer, stamps_.verify);
        current_.roundMs = millisBetween(stamps_.begin, at);
        RoundReport done = current_;
        current_ = RoundReport{};
        stamps_ = Stamps{};
        return done;
      }
      default:
        break;
    }
    return std::nullopt;
  }
  if (const auto* commit = message.as<msg::Commit>(); commit && commit->round() == current_.round) {
    current_.committed = true;
    current_.bytes = commit->bytes();
  } else if (const auto* abort = message.as<msg::Abort>(); abort && abort->round() == current_.round) {
    current_.abortReason = std::string(msg::EnumNameAbortReason(abort->reason())) + ": " +
                           (abort->detail() ? abort->detail()->str() : std::string());
  }
  (void)topic;
  return std::nullopt;
}

std::string formatReport(const RoundReport& report) {
  char line[512];
  if (report.committed) {
    std::snprintf(line, sizeof line,
                  "round %3" PRIu64 "  version %3" PRIu64
                  "  %8.1f MB  to %u workers  pause %7.1f ms  transfer %7.1f ms"
                  "  %6.2f GB/s",
                  report.round, report.version, static_cast<double>(report.bytes) / 1e6, report.workers, report.pauseMs,
                  report.transferMs, report.gigabytesPerSecond());
  } else {
    std::snprintf(line, sizeof line, "round %3" PRIu64 "  version %3" PRIu64 "  ABORTED after %.1f ms: %s",
                  report.round, report.version, report.roundMs, report.abortReason.c_str());
  }
  return line;
}

}  // namespace wsync::demo
