#pragma once
// The round state machine (docs/update-round.md): begin, pause, transfer, verify, commit, resume; abort on any
// refusal, mismatch, timeout or death. It owns the round in progress, the manifests trainers sent, the committed
// version and the outcomes of the last rounds, and the payload channels' owners; the rest of the coordinator reads
// them through the accessors below. Threading: the coordinator's one thread.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "agent_registry.hpp"
#include "outbox.hpp"
#include "pause_word.hpp"
#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/core/fault_hook.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/coordinator/coordinator.hpp"

namespace wsync::coordinator {

using Clock = std::chrono::steady_clock;

// A worker taking part in the round in progress.
struct Participant {
  std::string routingId;
  std::string agentId;
  bool acked = false;
  bool done = false;
  std::uint64_t bytes = 0;
  bus::Digest digest;
  bool manifestResent = false;  // it said it lacked the manifest and was sent it again in this round
};

struct ActiveRound {
  std::uint64_t id = 0;
  std::uint64_t version = 0;
  std::string label;
  bus::Digest manifestDigest;
  std::uint64_t totalBytes = 0;
  std::uint64_t bucketBytes = 0;
  std::uint32_t bucketCount = 0;
  msg::PauseMode mode = msg::PauseMode::Keep;
  bus::ChannelOwner* owner = nullptr;  // of the round's channel
  bus::ChannelGrant grant;             // what its agents open
  std::string trainerRoutingId;
  std::string trainerAgentId;
  bool trainerDone = false;
  std::uint64_t trainerBytes = 0;
  bus::Digest trainerDigest;
  std::vector<Participant> participants;
  msg::RoundPhase phase = msg::RoundPhase::Idle;
  Clock::time_point deadline{};
  Clock::time_point begun{};
  Clock::time_point transferStarted{};
};

// The version the bus serves: carried over from a dead coordinator's block, then moved by commits only.
struct CommittedVersion {
  std::uint64_t version = 0;
  std::uint64_t round = 0;
  bus::Digest digest;  // the committed payload's
  std::string label;
};

// How a finished round ended, kept for VersionQuery: a trainer that lost its connection mid-round learns its
// version's fate from it instead of guessing.
struct RoundRecord {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  std::string trainerAgentId;
  bool committed = false;
  msg::AbortReason reason = msg::AbortReason::None;
  std::string detail;
};

// What became of a version (VersionQuery's answer).
struct VersionAnswer {
  msg::VersionFate fate = msg::VersionFate::Unknown;
  std::uint64_t round = 0;
  msg::AbortReason reason = msg::AbortReason::None;
  std::string detail;
};

// What the round machine uses of the coordinator around it.
struct RoundMachineParts {
  const CoordinatorOptions& options;
  bus::ControlBlockOwner& block;
  AgentRegistry& agents;  // read; the machine records which manifests each worker was sent
  Outbox& outbox;
  PauseWord& pause;
  CoordinatorStats& stats;
  std::shared_ptr<bus::FaultHook> faults;  // test only: null in production
  // A test fault's disconnect: closes the request endpoint for the outage (Coordinator::Impl).
  std::function<void(std::chrono::milliseconds outage, const std::string& why)> cutRequestEndpoint;
  // The time every phase deadline is set and checked by: the steady clock, or a test's hand-moved one.
  std::function<Clock::time_point()> now = Clock::now;
};

class RoundMachine {
 public:
  RoundMachine(RoundMachineParts parts, std::vector<std::unique_ptr<bus::ChannelOwner>> channels);

  // A coordinator that replaced a dead one's control block goes on from its committed version and round number.
  void carryOver(const CommittedVersion& committed, std::uint64_t lastRound);

  // The messages of a round, from registered agents (`seq`: the request's, for a refusal).
  void begin(const AgentRecord& trainer, std::uint64_t seq, const msg::BeginUpdate& begin);
  void pauseAck(const AgentRecord& worker, const msg::PauseAck& ack);
  void updateDone(const AgentRecord& agent, const msg::UpdateDone& done);
  void trainerAbort(const AgentRecord& trainer, const msg::Abort& abort);
  // An agent left the bus, for whatever reason: a round it takes part in cannot end well.
  void agentGone(const AgentRecord& agent, const std::string& why);
  // A phase past its timeout aborts the round, naming whom it waited for.
  void checkDeadline();
  // Aborts the round in progress, if any (an operator, the coordinator stopping); false when there was none.
  bool abort(msg::AbortReason reason, const std::string& detail);

  // The round in progress, or null.
  const ActiveRound* current() const { return round_ ? &*round_ : nullptr; }
  msg::RoundPhase phase() const { return round_ ? round_->phase : msg::RoundPhase::Idle; }
  // The number of the last round begun (the one in progress, if any).
  std::uint64_t lastRound() const { return roundCounter_; }
  const CommittedVersion& committed() const { return committed_; }
  VersionAnswer fateOf(std::uint64_t version) const;
  // The owner of channel `kind`, or null where this coordinator has none (a build without CUDA, a kind a newer
  // agent offers).
  const bus::ChannelOwner* ownerOf(msg::ChannelKind kind) const;

 private:
  struct CachedManifest {
    bus::Manifest manifest;
    std::uint32_t bucketCount = 0;     // for the shm bucket size and the alignment, computed once
    std::uint32_t gpuBucketCount = 0;  // for the GPU channels' bucket size
    std::uint64_t lastUsedRound = 0;
  };
  struct DigestLess {
    bool operator()(const bus::Digest& a, const bus::Digest& b) const {
      return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
    }
  };

  // Sends `worker` the round's manifest unless it is known to hold it already.
  void sendManifestIfNew(AgentRecord& worker, const bus::Manifest& manifest);
  // A worker that lacks the round's manifest (it evicted it, or never got it): sent the manifest and the Pause again,
  // once in a round. False when it had been sent both already in this round.
  bool resendManifest(Participant& participant, AgentRecord& worker);
  void startTransfer();
  void verifyAndCommit();
  void abortRound(msg::AbortReason reason, const std::string& detail, const std::string& agentId);
  void resumeWorkers(bool committed);
  // Keeps how the round ended in `history_` (VersionQuery).
  void recordOutcome(bool committed, msg::AbortReason reason, const std::string& detail);
  void setPhase(msg::RoundPhase phase, const std::string& detail = {});
  Participant* findParticipant(const std::string& routingId);
  const CachedManifest* cacheManifest(bus::Manifest&& manifest);
  bus::ChannelOwner* ownerOf(msg::ChannelKind kind);
  // The channel resources of a round about to begin on `kind`, or why it cannot run on it.
  tl::expected<void, std::string> prepareChannel(ActiveRound& next, msg::ChannelKind kind, const AgentRecord& trainer,
                                                 const std::vector<const AgentRecord*>& workers);
  // Test faults: the fault of this point and round, if it is armed; a disconnect closes the request endpoint.
  void strike(bus::FaultPoint point);

  RoundMachineParts parts_;
  std::vector<std::unique_ptr<bus::ChannelOwner>> channels_;  // one per channel this build has (bus::registry)
  std::map<bus::Digest, CachedManifest, DigestLess> manifests_;
  std::optional<ActiveRound> round_;
  std::uint64_t roundCounter_ = 0;
  CommittedVersion committed_;
  std::deque<RoundRecord> history_;  // newest last, at most kRoundHistory
};

}  // namespace wsync::coordinator
