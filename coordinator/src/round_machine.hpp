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
#include <span>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "agent_registry.hpp"
#include "outbox.hpp"
#include "pause_word.hpp"
#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"
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
  // A region round: what it took from each source, and its digest over them (the one its Commit carries).
  bus::RegionTransferResult pairs;
  bus::Digest receiverDigest;
};

// A sender of the round: the trainer, or one rank of a sharded trainer in a region round (docs/regions.md).
struct RoundSource {
  std::string routingId;  // empty until its rank began (a region round gathers its ranks in Begin)
  std::string agentId;
  bool done = false;
  std::uint64_t bytes = 0;
  bus::Digest digest;
  // A region round: what it holds, and what it sent each receiver.
  bus::Digest holdingsDigest;
  bus::RegionTransferResult pairs;
};

inline Participant participantOf(const AgentRecord& worker) {
  Participant participant;
  participant.routingId = worker.routingId;
  participant.agentId = worker.agentId;
  return participant;
}

inline RoundSource sourceOf(const AgentRecord& trainer) {
  RoundSource source;
  source.routingId = trainer.routingId;
  source.agentId = trainer.agentId;
  return source;
}

struct ActiveRound {
  std::uint64_t id = 0;
  std::uint64_t version = 0;
  std::string label;
  bus::Digest manifestDigest;
  std::uint64_t totalBytes = 0;
  std::uint64_t bucketBytes = 0;
  std::uint32_t bucketCount = 0;
  msg::PauseMode mode = msg::PauseMode::Keep;
  msg::ChannelKind channel = msg::ChannelKind::Shm;
  bus::ChannelOwner* owner = nullptr;  // of the round's channel
  bus::ChannelGrant grant;             // what its agents open
  // One for a trainer that holds the whole model; a region round's ranks in rank order.
  std::vector<RoundSource> sources;
  std::vector<Participant> participants;
  // A region round (docs/regions.md): sharded sources or sliced receivers, moved by `plan`.
  bool regions = false;
  std::shared_ptr<const bus::RegionPlan> plan;
  bus::Digest versionDigest;  // the committed version's digest (the trainer's for a round of one source)
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
  // A region round: each worker's receiver digest, by agent id, for a worker that lost its Commit (Welcome).
  std::map<std::string, bus::Digest, std::less<>> receiverDigests;
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

// Why a request is refused (the Error its sender gets).
struct Refusal {
  msg::ErrorCode code = msg::ErrorCode::None;
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

  // The checks every BeginUpdate passes, of one source or of several: its manifest, cached, or the refusal.
  tl::expected<CachedManifest*, Refusal> checkBegin(const msg::BeginUpdate& begin);
  void refuse(const AgentRecord& agent, std::uint64_t seq, const Refusal& refusal);
  // Pauses every participant of the round just begun (the shared-memory word, then each worker).
  void pauseWorkers(const bus::Manifest& manifest);
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
  CachedManifest* cacheManifest(bus::Manifest&& manifest);
  bus::ChannelOwner* ownerOf(msg::ChannelKind kind);
  // The channel resources of a round about to begin on `kind`, or why it cannot run on it.
  tl::expected<void, std::string> prepareChannel(ActiveRound& next, msg::ChannelKind kind,
                                                 std::span<const AgentRecord* const> senders,
                                                 const std::vector<const AgentRecord*>& workers);
  // Test faults: the fault of this point and round, if it is armed; a disconnect closes the request endpoint.
  void strike(bus::FaultPoint point);
  RoundSource* findSource(const std::string& routingId);
  // The first rank that began (a region round gathers its ranks in any order).
  const RoundSource& firstSource() const;
  // "trainer 't0'", or "trainer rank 2 ('t2')" in a round of several.
  std::string sourceName(std::size_t source) const;

  // Region rounds (region_round.cpp, docs/regions.md).
  // Whether `begin` starts one: several sources, holdings declared, or a worker that binds slices.
  bool isRegionBegin(const msg::BeginUpdate& begin) const;
  // A rank's BeginUpdate: begins the round (the first rank) or joins it; once every rank is in, the plan.
  void beginRegions(const AgentRecord& trainer, std::uint64_t seq, const msg::BeginUpdate& begin,
                    CachedManifest& cached);
  void joinRegions(const AgentRecord& trainer, std::uint64_t seq, const msg::BeginUpdate& begin);
  // The holdings a BeginUpdate declares (sent with it, known by digest, or the whole manifest), cached; or the
  // refusal.
  tl::expected<bus::Digest, Refusal> holdingsOf(const msg::BeginUpdate& begin, const bus::Manifest& manifest);
  // Every rank began: plans the round, prepares the channel for every source, pauses. Aborts naming what is wrong.
  void planRegions();
  // The declarations each agent needs for the plan, sent where they are new (sources: all; workers: holdings).
  void sendDeclarations();
  void sendRegionPlans();
  void regionDone(const AgentRecord& agent, const msg::UpdateDone& done);
  void verifyRegionsAndCommit();
  // An agent that failed a region round may lack a declaration it was sent (its cache is bounded too): the next
  // round sends it everything again.
  void forgetDeclarations(const std::string& routingId);
  void noteDeclared(const AgentRecord& trainer, const msg::BeginUpdate& begin);
  // Commit's last steps, for both kinds of round: tell the sources and every worker, resume.
  void announceCommit();
  // A round of one source's TransferPlans: every receiver's, then the trainer's.
  void sendPlans();

  RoundMachineParts parts_;
  std::vector<std::unique_ptr<bus::ChannelOwner>> channels_;  // one per channel this build has (bus::registry)
  std::map<bus::Digest, CachedManifest, DigestLess> manifests_;
  struct CachedHoldings {
    bus::SourceHoldings holdings;
    bus::Digest manifest;
    std::uint64_t lastUsedRound = 0;
  };
  std::map<bus::Digest, CachedHoldings, DigestLess> holdings_;
  std::optional<ActiveRound> round_;
  std::uint64_t roundCounter_ = 0;
  CommittedVersion committed_;
  std::deque<RoundRecord> history_;  // newest last, at most kRoundHistory
};

}  // namespace wsync::coordinator
