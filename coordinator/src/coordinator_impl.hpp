#pragma once
// The coordinator's state. Private: everything here is touched by the coordinator's one thread only.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "agent_registry.hpp"
#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/log_limiter.hpp"
#include "wsync/bus/transport/zap_authenticator.hpp"
#include "wsync/bus/transport/event_publisher.hpp"
#include "wsync/bus/core/fault_hook.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/core/process_identity.hpp"
#include "wsync/bus/transport/router_endpoint.hpp"
#include "wsync/coordinator/coordinator.hpp"

namespace wsync::coordinator {

using Clock = std::chrono::steady_clock;

struct Participant {
  std::string routingId;
  std::string agentId;
  bool acked = false;
  bool done = false;
  std::uint64_t bytes = 0;
  bus::Digest digest;
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
  bus::ChannelGrant grant;              // what its agents open
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

struct DigestLess {
  bool operator()(const bus::Digest& a, const bus::Digest& b) const {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  }
};

struct CachedManifest {
  bus::Manifest manifest;
  std::uint32_t bucketCount = 0;     // for the shm bucket size and the alignment, computed once
  std::uint32_t gpuBucketCount = 0;  // for the GPU channels' bucket size
  std::uint64_t lastUsedRound = 0;
};

struct Coordinator::Impl {
  Impl(CoordinatorOptions options_, bus::ControlBlockOwner&& block_,
       std::vector<std::unique_ptr<bus::ChannelOwner>>&& channels_, zmq::context_t&& context_,
       bus::RouterEndpoint&& router_, bus::EventPublisher&& events_)
      : options(std::move(options_)),
        block(std::move(block_)),
        channels(std::move(channels_)),
        context(std::move(context_)),
        router(std::move(router_)),
        events(std::move(events_)),
        faults(options.faultHook) {}

  // coordinator.cpp: the loop, registration, liveness, snapshots.
  void step(std::chrono::milliseconds maxWait);
  void handle(const std::string& source, const bus::Message& message);
  void handleHello(const std::string& source, const bus::Message& message, const msg::AgentHello& hello);
  void handleSnapshotRequest(const std::string& source, const bus::Message& message);
  void handleVersionQuery(const std::string& source, const bus::Message& message, const msg::VersionQuery& query);
  // Why this hello cannot register (the field and the limit it breaks), or empty when it can.
  std::string helloProblem(const msg::AgentHello& hello) const;
  // Why one more worker offering these channels would exceed what a round on one of them can take, or empty.
  std::string admissionProblem(const msg::AgentHello& hello) const;
  void checkLiveness();
  void publishBeat();
  // The request endpoint's memory budget (CoordinatorOptions::receiveMemoryBudget): checked every liveness pass.
  void checkReceiveMemory();
  // Closes the request endpoint (every connection and what ZeroMQ held for it goes), stays closed for `outage`, and
  // binds it again. Agents find their link lost and register again.
  void rebindRequestEndpoint(std::chrono::milliseconds outage, const std::string& why);

  // control.cpp: an operator's requests (wsync-ctl).
  void handleControl(const std::string& source, const bus::Message& message, const msg::ControlRequest& request);
  void sendOperatorPause(const std::string& routingId);
  void removeAgent(const std::string& routingId, msg::AgentEventKind kind, const std::string& detail);
  void publishAgentEvent(const AgentRecord& agent, msg::AgentEventKind kind, const std::string& detail);
  void replyError(const std::string& peer, std::uint64_t inReplyTo, msg::ErrorCode code, const std::string& detail);
  std::optional<std::uint32_t> freeSlot();
  bool isAlive(const AgentRecord& agent, std::uint64_t nowMs, std::string& why) const;
  void shutdown();

  // round.cpp: the state machine.
  void handleBegin(const std::string& source, const bus::Message& message, const msg::BeginUpdate& begin);
  void handlePauseAck(const AgentRecord& agent, const msg::PauseAck& ack);
  void handleUpdateDone(const AgentRecord& agent, const msg::UpdateDone& done);
  void handleTrainerAbort(const AgentRecord& agent, const msg::Abort& abort);
  void startTransfer();
  void verifyAndCommit();
  void abortRound(msg::AbortReason reason, const std::string& detail, const std::string& agentId);
  void resumeWorkers(bool committed);
  // Keeps how the round ended in `history` (VersionQuery).
  void recordOutcome(bool committed, msg::AbortReason reason, const std::string& detail);
  void checkRoundDeadline();
  void agentGone(const AgentRecord& agent, const std::string& why);
  void setPhase(msg::RoundPhase phase, const std::string& detail = {});
  Participant* findParticipant(const std::string& routingId);
  const CachedManifest* cacheManifest(bus::Manifest&& manifest);
  // The owner of channel `kind`, or null where this coordinator has none (a build without CUDA, a kind a newer
  // agent offers).
  bus::ChannelOwner* ownerOf(msg::ChannelKind kind) const;
  // The channel resources of a round about to begin on `kind`, or why it cannot run on it.
  tl::expected<void, std::string> prepareChannel(ActiveRound& next, msg::ChannelKind kind, const AgentRecord& trainer,
                                                 const std::vector<const AgentRecord*>& workers);
  // Sends to one agent. A registered agent its message cannot reach (gone, or not reading) is noted and dropped by
  // dropUnreachable().
  void sendTo(const std::string& peer, std::span<const std::uint8_t> bytes);
  // Removes the agents whose connection was found gone: a command they never got (a Pause, an Abort, a Commit)
  // would leave them waiting for good. Their next message is refused as unknown and they register again.
  void dropUnreachable();
  // Test faults: the fault of this point and round, if it is armed; a disconnect closes the request endpoint.
  void strike(bus::FaultPoint point);
  std::uint64_t nextSeq() { return ++sentSeq; }
  // The one way a message leaves for an agent: `body`, built in `builder`, in an envelope with this coordinator's
  // epoch and the next sequence number. The bytes stay valid until the builder is reset (one message to many peers).
  template <typename Body>
  std::span<const std::uint8_t> stamp(flatbuffers::Offset<Body> body) {
    return builder.finish(body, bus::EnvelopeStamp{block.epoch(), nextSeq()});
  }
  // The one way an event leaves: `body`, built in `builder`, on `topic`, counted in the control block.
  template <typename Body>
  void publish(const std::string& topic, flatbuffers::Offset<Body> body) {
    (void)events.publish(topic, builder, body, block.epoch());
    block.setEventsPublished(events.published());
  }

  CoordinatorOptions options;
  bus::ControlBlockOwner block;
  std::vector<std::unique_ptr<bus::ChannelOwner>> channels;  // one per channel this build has (bus::registry)
  zmq::context_t context;
  bus::RouterEndpoint router;
  bus::EventPublisher events;
  // tcp with CURVE: admits the allowed client keys (declared after the context: it must close its socket first).
  std::unique_ptr<bus::ZapAuthenticator> authenticator;
  std::shared_ptr<bus::FaultHook> faults;  // test only: null in production
  // Registered agents a command could not reach (routing id, why), dropped by dropUnreachable().
  std::vector<std::pair<std::string, std::string>> unreachable;
  // Log lines a client can cause (a reply it does not read, a refused connection) come at most a few per interval.
  bus::LogLimiter logLimiter;
  bus::MessageBuilder builder{4096};
  std::string hostname;

  AgentRegistry agents;
  std::map<bus::Digest, CachedManifest, DigestLess> manifests;
  std::optional<ActiveRound> round;
  std::optional<msg::PauseMode> operatorPause;  // set by wsync-ctl pause until wsync-ctl resume; in the block too
  std::uint64_t roundCounter = 0;
  std::uint64_t committedVersion = 0;
  std::uint64_t committedRound = 0;
  bus::Digest committedDigest;  // the committed payload's (carried over from a dead coordinator's block)
  std::string committedLabel;
  std::deque<RoundRecord> history;  // newest last, at most kRoundHistory
  std::uint64_t baselineAllocatedBytes = 0;  // the coordinator's heap once started
  Clock::time_point nextMemoryCheck{};
  std::uint64_t sentSeq = 0;
  Clock::time_point nextLivenessCheck{};
  Clock::time_point nextBeat{};  // the next "bus/beat" event
  CoordinatorStats stats;
};

}  // namespace wsync::coordinator
