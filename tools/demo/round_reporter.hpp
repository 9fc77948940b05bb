#pragma once
// Turns the coordinator's round events into one report per round: what the demo prints as live progress.
// Times come from the events' send stamps, so they are the coordinator's view of each phase.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "wsync/bus/protocol/message.hpp"

namespace wsync::demo {

struct RoundReport {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  bool committed = false;
  std::uint64_t bytes = 0;
  std::uint32_t workers = 0;
  double pauseMs = 0;     // pause event -> resume event: how long generation stood still
  double transferMs = 0;  // transfer event -> verify event: the payload's time
  double roundMs = 0;     // begin event -> idle event
  std::string abortReason;

  double gigabytesPerSecond() const { return transferMs > 0 ? static_cast<double>(bytes) / transferMs / 1e6 : 0; }
};

// A round whose payload is moving: from its transfer event to its verify (or abort) event.
struct TransferInProgress {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  std::uint64_t totalBytes = 0;
};

class RoundReporter {
 public:
  // Feeds one event; returns the report of the round it completes, if it does.
  std::optional<RoundReport> onEvent(std::string_view topic, const bus::Message& message);
  const std::optional<TransferInProgress>& transfer() const { return transfer_; }

 private:
  struct Stamps {
    std::uint64_t begin = 0, pause = 0, transfer = 0, verify = 0, resume = 0;
  };
  RoundReport current_;
  Stamps stamps_;
  std::optional<TransferInProgress> transfer_;
};

std::string formatReport(const RoundReport& report);

}  // namespace wsync::demo
