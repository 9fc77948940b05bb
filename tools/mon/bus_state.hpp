#pragma once
// What a monitor knows about a bus: the coordinator's snapshot it started from, every event since, and the
// totals it counted (for the metrics). Fed by one thread; read by the renderers on the same thread.
//
// Events are numbered per topic family: an event at or below the snapshot's number for its family is already in
// the snapshot and skipped; a number beyond the next one means events were lost (PUB/SUB drops at its high-water
// mark), and the caller asks for a new snapshot.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <wsync/schemas/control_generated.h>

#include "histogram.hpp"
#include "wsync/bus/protocol/message.hpp"

namespace wsync::mon {

struct AgentView {
  std::string id;
  msg::Role role = msg::Role::Unknown;
  std::uint32_t slot = 0;
  std::int32_t rank = -1;
  std::uint64_t appliedVersion = 0;
  std::uint64_t heartbeatAgeMs = 0;  // as of `seenAt`
  std::chrono::steady_clock::time_point seenAt{};
  msg::AgentState state = msg::AgentState::Unknown;
  std::uint64_t transferRound = 0;  // its last transfer's round, and its bytes moved in it so far
  std::uint64_t transferBytes = 0;
};

// One finished round, with its phases' durations from the coordinator's event times (negative: not reached).
struct RoundRecord {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  bool committed = false;
  msg::AbortReason reason = msg::AbortReason::None;
  std::string detail;
  std::uint32_t workers = 0;
  std::uint64_t bytes = 0;      // per worker
  double pauseSeconds = -1;     // pause sent -> every worker paused (the transfer began)
  double transferSeconds = -1;  // transfer began -> every digest in (verify)
  double totalSeconds = -1;     // begin -> commit or abort
};

// The round in progress.
struct CurrentRound {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  msg::RoundPhase phase = msg::RoundPhase::Idle;
  std::uint32_t workers = 0;
  std::uint64_t beganNs = 0;  // coordinator's CLOCK_REALTIME of each phase's event (0: not yet)
  std::uint64_t pauseNs = 0;
  std::uint64_t transferNs = 0;
  std::uint64_t verifyNs = 0;
  // The payload's progress, from the agents' slots in the latest snapshot (refreshed often during a transfer).
  std::uint64_t totalBytes = 0;                                           // per worker (0: unknown)
  std::uint64_t bytesSent = 0;                                            // by the trainer
  std::uint64_t slowestReceived = 0;                                      // by the worker furthest behind
  std::optional<std::chrono::steady_clock::time_point> transferSeenAt{};  // this monitor's clock
  std::chrono::steady_clock::time_point progressAt{};                     // when bytesSent was sampled

  // Bytes per second since the transfer began, as this monitor saw it (0: not known yet).
  double sendRate() const;
};

struct RoundTotals {
  std::uint64_t committed = 0;
  std::uint64_t aborted = 0;
  std::map<msg::AbortReason, std::uint64_t> abortsByReason;
  std::uint64_t bytesMoved = 0;  // committed bytes x workers
  Histogram roundSeconds;
  Histogram pauseSeconds;
  Histogram transferSeconds;
};

class BusState {
 public:
  // Rounds kept for display.
  static constexpr std::size_t kRecentRounds = 8;

  enum class Applied : std::uint8_t { Used, AlreadyInSnapshot, Gap };

  void applySnapshot(const bus::Message& reply, std::chrono::steady_clock::time_point now);
  Applied apply(std::string_view topic, const bus::Message& event, std::chrono::steady_clock::time_point now);

  bool hasSnapshot() const { return hasSnapshot_; }
  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t committedVersion() const { return committedVersion_; }
  const std::string& committedLabel() const { return committedLabel_; }
  bool coordinatorSeen() const { return lastBeat_.has_value(); }
  std::chrono::steady_clock::time_point lastBeat() const {
    return lastBeat_.value_or(std::chrono::steady_clock::time_point{});
  }
  const std::optional<CurrentRound>& current() const { return current_; }
  const std::deque<RoundRecord>& recent() const { return recent_; }
  const std::map<std::string, AgentView>& agents() const { return agents_; }
  const RoundTotals& totals() const { return totals_; }
  std::uint64_t gaps() const { return gaps_; }

 private:
  void finishRound(RoundRecord record, std::uint64_t endedNs);
  // Records when the current round entered the transition's phase (its coordinator's send time).
  void noteStamp(const msg::RoundTransition& transition, std::uint64_t sentNs);

  bool hasSnapshot_ = false;
  std::uint64_t epoch_ = 0;
  std::uint64_t committedVersion_ = 0;
  std::string committedLabel_;
  std::map<std::string, std::uint64_t> lastSeq_;  // by family: the last event applied or in the snapshot
  std::map<std::string, AgentView> agents_;       // by agent id
  std::optional<CurrentRound> current_;
  std::deque<RoundRecord> recent_;  // newest first
  RoundTotals totals_;
  std::optional<std::chrono::steady_clock::time_point> lastBeat_;
  std::uint64_t gaps_ = 0;
};

}  // namespace wsync::mon
