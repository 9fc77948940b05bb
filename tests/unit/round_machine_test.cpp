// The coordinator's round machine (coordinator/src/round_machine.hpp, docs/update-round.md) alone, in one thread:
// its outbox writes to a recording wire, its channels are fake owners, its clock is moved by hand and its agents
// are records in a real registry. Each test drives a round by calling the machine as the coordinator's loop would
// (begin, pauseAck, updateDone, trainerAbort, agentGone, checkDeadline) and reads what it sent, what it published,
// what it wrote into the control block and what it asked of the channel's owner. No socket, no process, no sleep:
// a deadline passes when the test moves the clock past it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "agent_registry.hpp"
#include "fake_channel_owner.hpp"
#include "outbox.hpp"
#include "pause_word.hpp"
#include "round_machine.hpp"
#include "test_environment.hpp"
#include "wsync/bus/core/log_limiter.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/state/control_block.hpp"

namespace wsync::coordinator {
namespace {

using namespace std::chrono_literals;
using Names = std::vector<std::string>;

constexpr bus::Digest kPayloadDigest{0x1111, 0x2222};
constexpr bus::Digest kSpoiledDigest{0x1111, 0x3333};

// Time that moves only when the test says so.
class ManualClock {
 public:
  Clock::time_point now() const { return now_; }
  void advance(Clock::duration by) { now_ += by; }

 private:
  Clock::time_point now_ = Clock::time_point{} + 1h;
};

// The outbox's wire, recording: every addressed message and every event, decoded as an agent would read it. A peer
// marked unreachable fails its sends the way a ROUTER_MANDATORY socket does for a connection that is gone.
class RecordingWire final : public OutboxWire {
 public:
  struct Sent {
    std::string peer;
    bus::Message message;
  };
  struct Published {
    std::string topic;
    bus::Message message;
  };

  tl::expected<void, bus::TransportFailure> send(std::string_view peer, std::span<const std::uint8_t> bytes) override {
    if (std::find(unreachable.begin(), unreachable.end(), peer) != unreachable.end()) {
      return bus::fail(bus::TransportError::PeerUnreachable, "the test cut it");
    }
    sent.push_back(Sent{std::string(peer), decode(bytes)});
    return {};
  }
  void publish(std::string_view topic, const Event& event) override {
    events.push_back(Published{std::string(topic), decode(event.finish(bus::EnvelopeStamp{1, ++events_}))});
  }
  std::uint64_t published() const override { return events_; }

  // The names of the bodies sent to `peer`, in order ("Pause", "TransferPlan", ...).
  Names bodiesTo(const std::string& peer) const {
    Names names;
    for (const Sent& entry : sent) {
      if (entry.peer == peer) names.emplace_back(bus::bodyName(entry.message.type()));
    }
    return names;
  }
  // The last `Body` sent to `peer`, or null.
  template <typename Body>
  const Body* last(const std::string& peer) const {
    for (auto entry = sent.rbegin(); entry != sent.rend(); ++entry) {
      if (entry->peer != peer) continue;
      if (const Body* body = entry->message.as<Body>()) return body;
    }
    return nullptr;
  }
  // Every peer a `Body` went to, in order.
  template <typename Body>
  Names peersOf() const {
    Names peers;
    for (const Sent& entry : sent) {
      if (entry.message.as<Body>() != nullptr) peers.push_back(entry.peer);
    }
    return peers;
  }
  Names topics() const {
    Names names;
    for (const Published& entry : events) names.push_back(entry.topic);
    return names;
  }
  template <typename Body>
  const Body* lastEvent() const {
    for (auto entry = events.rbegin(); entry != events.rend(); ++entry) {
      if (const Body* body = entry->message.as<Body>()) return body;
    }
    return nullptr;
  }
  void clear() {
    sent.clear();
    events.clear();
  }

  std::vector<Sent> sent;
  std::vector<Published> events;
  std::vector<std::string> unreachable;

 private:
  static bus::Message decode(std::span<const std::uint8_t> bytes) {
    auto decoded = bus::Message::decode(bytes);
    if (!decoded) throw std::runtime_error("the outbox sent bytes that do not decode");
    return std::move(*decoded);
  }

  std::uint64_t events_ = 0;
};

// A fault hook that logs every point the machine reaches and asks for a disconnect at one of them.
class RecordingFaultHook final : public bus::FaultHook {
 public:
  bool armedAt(bus::FaultPoint point, std::uint64_t) const override { return outageAt == point; }
  std::optional<std::chrono::milliseconds> reached(bus::FaultPoint point, std::uint64_t version) override {
    reachedPoints.emplace_back(std::string(bus::toString(point)) + "@" + std::to_string(version));
    if (outageAt == point) return 250ms;
    return std::nullopt;
  }

  std::optional<bus::FaultPoint> outageAt;
  Names reachedPoints;
};

std::string text(const flatbuffers::String* value) { return value != nullptr ? value->str() : std::string(); }

bus::Manifest twoTensors() {
  // 4,096 + 256 bytes: two buckets of the fixture's 4,096 (each tensor starts aligned to 256).
  auto manifest = bus::Manifest::create(
      {bus::TensorSpec{"embed", msg::DType::F32, {64, 16}}, bus::TensorSpec{"head", msg::DType::BF16, {16, 8}}});
  if (!manifest) throw std::runtime_error(manifest.error().describe());
  return std::move(*manifest);
}

// A BeginUpdate's fields, as a test varies them.
struct BeginFields {
  std::uint64_t version = 1;
  bool withManifest = true;
  msg::ChannelKind channel = msg::ChannelKind::Shm;
  msg::PauseMode mode = msg::PauseMode::Keep;
  std::optional<std::uint64_t> totalBytes{};  // the manifest's unless set
  std::optional<bus::Digest> digest{};        // the manifest's unless set
  std::string label{};
};

flatbuffers::Offset<flatbuffers::String> optionalString(flatbuffers::FlatBufferBuilder& fbb, const std::string& value) {
  return value.empty() ? flatbuffers::Offset<flatbuffers::String>{} : fbb.CreateString(value);
}

class RoundMachineTest : public testing::Test {
 protected:
  static constexpr std::uint64_t kBucketBytes = 4096;
  static constexpr std::uint64_t kGpuBucketBytes = 1 << 20;

  RoundMachineTest() : manifest_(twoTensors()) {
    options_.bus = test::uniqueBusName("round-machine");
    options_.bucketBytes = kBucketBytes;
    options_.gpuBucketBytes = kGpuBucketBytes;
    auto block = bus::ControlBlockOwner::create(options_.bus);
    if (!block) throw std::runtime_error(block.error().describe());
    block_.emplace(std::move(*block));
    outbox_ = std::make_unique<Outbox>(wire_, *block_, agents_, logLimiter_);
    pause_ = std::make_unique<PauseWord>(*block_);
    addAgent("trainer-conn", "trainer", msg::Role::Trainer, 0);
    addAgent("w0-conn", "worker-0", msg::Role::Worker, 0);
    addAgent("w1-conn", "worker-1", msg::Role::Worker, 1);
  }

  // The machine, made at the first use so that a test can register agents, arm faults and choose grants first.
  RoundMachine& machine() {
    if (!machine_) {
      std::vector<std::unique_ptr<bus::ChannelOwner>> channels;
      channels.push_back(std::make_unique<test::FakeChannelOwner>(shmTraits_, shmLog_));
      channels.push_back(std::make_unique<test::FakeChannelOwner>(gpuTraits_, gpuLog_));
      machine_ = std::make_unique<RoundMachine>(
          RoundMachineParts{options_, *block_, agents_, *outbox_, *pause_, stats_, faultHook_,
                            [this](std::chrono::milliseconds outage, const std::string& why) {
                              cuts_.push_back(std::to_string(outage.count()) + " ms: " + why);
                            },
                            [this] { return clock_.now(); }},
          std::move(channels));
    }
    return *machine_;
  }

  const AgentRecord& addAgent(const std::string& routingId, const std::string& agentId, msg::Role role,
                              std::int32_t rank,
                              std::vector<msg::ChannelKind> channels = {msg::ChannelKind::Shm,
                                                                        msg::ChannelKind::Nccl}) {
    AgentRecord record;
    record.routingId = routingId;
    record.agentId = agentId;
    record.role = role;
    record.rank = rank;
    record.sameHost = true;
    record.hostname = "here";
    record.channels = std::move(channels);
    return agents_.add(std::move(record));
  }
  const AgentRecord& agent(const std::string& routingId) {
    const AgentRecord* record = agents_.find(routingId);
    if (record == nullptr) throw std::runtime_error(routingId + " is not registered");
    return *record;
  }

  // Messages as the agents send them, each valid until the next is built.
  const msg::BeginUpdate& beginUpdate(const BeginFields& fields) {
    auto& fbb = resetBuilder();
    const msg::Digest128 digest = bus::toMessage(fields.digest.value_or(manifest_.digest()));
    const auto manifest = fields.withManifest ? manifest_.toMessage(fbb) : flatbuffers::Offset<msg::Manifest>{};
    const auto label = optionalString(fbb, fields.label);
    fbb.Finish(msg::CreateBeginUpdate(fbb, fields.version, label, &digest, manifest, fields.channel, fields.mode,
                                      fields.totalBytes.value_or(manifest_.totalBytes())));
    return *flatbuffers::GetRoot<msg::BeginUpdate>(fbb.GetBufferPointer());
  }
  const msg::PauseAck& pauseAck(std::uint64_t round, bool ok, msg::AbortReason reason = msg::AbortReason::None,
                                const std::string& detail = {}, bool manifestUnknown = false) {
    auto& fbb = resetBuilder();
    fbb.Finish(msg::CreatePauseAck(fbb, round, ok, 0, reason, optionalString(fbb, detail), manifestUnknown));
    return *flatbuffers::GetRoot<msg::PauseAck>(fbb.GetBufferPointer());
  }
  const msg::UpdateDone& updateDone(std::uint64_t round, bool ok, std::uint64_t bytes, const bus::Digest& digest,
                                    msg::AbortReason reason = msg::AbortReason::None, const std::string& detail = {}) {
    auto& fbb = resetBuilder();
    const msg::Digest128 wireDigest = bus::toMessage(digest);
    fbb.Finish(msg::CreateUpdateDone(fbb, round, 0, ok, bytes, &wireDigest, reason, optionalString(fbb, detail)));
    return *flatbuffers::GetRoot<msg::UpdateDone>(fbb.GetBufferPointer());
  }
  const msg::Abort& trainerCancel(std::uint64_t round, const std::string& detail) {
    auto& fbb = resetBuilder();
    fbb.Finish(msg::CreateAbort(fbb, round, 0, msg::AbortReason::Requested, fbb.CreateString(detail)));
    return *flatbuffers::GetRoot<msg::Abort>(fbb.GetBufferPointer());
  }

  // A round of `version` begun by the trainer; its id.
  std::uint64_t begin(const BeginFields& fields = {}) {
    machine().begin(agent("trainer-conn"), 7, beginUpdate(fields));
    const ActiveRound* round = machine().current();
    if (round == nullptr) throw std::runtime_error("the round did not begin");
    return round->id;
  }
  void ackAll(std::uint64_t round) {
    for (const char* worker : {"w0-conn", "w1-conn"}) machine().pauseAck(agent(worker), pauseAck(round, true));
  }
  // Every agent reports the payload; the workers with `workerDigest`.
  void doneAll(std::uint64_t round, const bus::Digest& workerDigest = kPayloadDigest) {
    const std::uint64_t bytes = manifest_.totalBytes();
    machine().updateDone(agent("w0-conn"), updateDone(round, true, bytes, kPayloadDigest));
    machine().updateDone(agent("w1-conn"), updateDone(round, true, bytes, workerDigest));
    machine().updateDone(agent("trainer-conn"), updateDone(round, true, bytes, kPayloadDigest));
  }

  // The Abort every agent of the round got (the same message for all), checked to be the same; null if none.
  const msg::Abort* abortSentToAll() {
    const msg::Abort* first = wire_.last<msg::Abort>("trainer-conn");
    for (const char* worker : {"w0-conn", "w1-conn"}) {
      const msg::Abort* abort = wire_.last<msg::Abort>(worker);
      if (first == nullptr || abort == nullptr || abort->reason() != first->reason() ||
          text(abort->detail()) != text(first->detail())) {
        return nullptr;
      }
    }
    return first;
  }
  // What every aborted round leaves behind: nothing committed, generation resumed, the machine idle, the owner
  // told (`transferBegun` as given), the outcome recorded.
  void expectAbortedAndResumed(std::uint64_t round, std::uint64_t version, bool transferBegun,
                               msg::AbortReason reason) {
    EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
    EXPECT_EQ(machine().current(), nullptr);
    EXPECT_EQ(block_->committedVersion(), 0u);
    EXPECT_EQ(machine().committed().version, 0u);
    EXPECT_FALSE(block_->pauseState().paused);
    EXPECT_EQ(block_->roundState(), (bus::RoundState{msg::RoundPhase::Idle, round}));
    EXPECT_EQ(shmLog_.aborted, (std::vector<test::FakeChannelOwnerLog::Aborted>{{round, transferBegun}}));
    EXPECT_EQ(stats_.roundsAborted, 1u);
    EXPECT_EQ(stats_.roundsCommitted, 0u);
    const VersionAnswer fate = machine().fateOf(version);
    EXPECT_EQ(fate.fate, msg::VersionFate::Aborted);
    EXPECT_EQ(fate.reason, reason);
    EXPECT_EQ(fate.round, round);
    const auto* resume = wire_.last<msg::Resume>("w0-conn");
    ASSERT_NE(resume, nullptr);
    EXPECT_EQ(resume->round(), round);
    EXPECT_EQ(resume->version(), 0u) << "an aborted round resumes on the committed version";
  }

  flatbuffers::FlatBufferBuilder& resetBuilder() {
    builder_.Clear();
    return builder_;
  }

  CoordinatorOptions options_;
  std::optional<bus::ControlBlockOwner> block_;
  AgentRegistry agents_;
  bus::LogLimiter logLimiter_;
  CoordinatorStats stats_;
  RecordingWire wire_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<PauseWord> pause_;
  ManualClock clock_;
  std::shared_ptr<RecordingFaultHook> faultHook_ = std::make_shared<RecordingFaultHook>();
  Names cuts_;
  test::FakeChannelTraits shmTraits_{msg::ChannelKind::Shm, bus::TensorMemory::Host, false, 64,
                                     bus::ChannelGrant{"arena-segment", {}, {}, false}};
  test::FakeChannelTraits gpuTraits_{msg::ChannelKind::Nccl, bus::TensorMemory::Device, true, 64,
                                     bus::ChannelGrant{{}, {1, 2, 3}, {}, true}};
  test::FakeChannelOwnerLog shmLog_;
  test::FakeChannelOwnerLog gpuLog_;
  bus::Manifest manifest_;
  flatbuffers::FlatBufferBuilder builder_{1024};
  std::unique_ptr<RoundMachine> machine_;
};

// ---- every phase of a round that commits ----

TEST_F(RoundMachineTest, BeginPausesEveryWorkerWithTheManifestFirst) {
  const std::uint64_t round = begin({.version = 5, .mode = msg::PauseMode::Wait});
  EXPECT_EQ(round, 1u);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  EXPECT_EQ(wire_.topics(), (Names{"round/begin", "round/pause"}));
  // The pause word before any message: engines polling it pause without one.
  EXPECT_EQ(block_->pauseState(), (bus::PauseState{true, msg::PauseMode::Wait, round}));
  EXPECT_EQ(block_->roundState(), (bus::RoundState{msg::RoundPhase::Pause, round}));
  for (const char* worker : {"w0-conn", "w1-conn"}) {
    EXPECT_EQ(wire_.bodiesTo(worker), (Names{"Manifest", "Pause"})) << worker;
    const auto* pause = wire_.last<msg::Pause>(worker);
    ASSERT_NE(pause, nullptr);
    EXPECT_EQ(pause->round(), round);
    EXPECT_EQ(pause->version(), 5u);
    EXPECT_EQ(pause->mode(), msg::PauseMode::Wait);
    EXPECT_EQ(bus::fromMessage(*pause->manifest_digest()), manifest_.digest());
  }
  EXPECT_TRUE(wire_.bodiesTo("trainer-conn").empty()) << "the trainer takes no part in the pause";
  // The owner prepared the round's channel for the trainer and the workers in rank order.
  ASSERT_EQ(shmLog_.prepared.size(), 1u);
  EXPECT_EQ(shmLog_.prepared[0].sender, "trainer");
  EXPECT_EQ(shmLog_.prepared[0].receivers, (Names{"worker-0", "worker-1"}));
  EXPECT_EQ(machine().fateOf(5).fate, msg::VersionFate::InProgress);
}

TEST_F(RoundMachineTest, TransferBeginsOnlyWhenEveryWorkerAckedAndPlansReachReceiversBeforeTheTrainer) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, true));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), Names{});
  machine().pauseAck(agent("w1-conn"), pauseAck(round, true));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  EXPECT_EQ(wire_.topics().back(), "round/transfer");
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), (Names{"w0-conn", "w1-conn", "trainer-conn"}));
  const auto* trainerPlan = wire_.last<msg::TransferPlan>("trainer-conn");
  ASSERT_NE(trainerPlan, nullptr);
  EXPECT_EQ(trainerPlan->receiver(), -1);
  EXPECT_EQ(trainerPlan->receiver_count(), 2u);
  EXPECT_EQ(trainerPlan->total_bytes(), manifest_.totalBytes());
  EXPECT_EQ(trainerPlan->bucket_bytes(), kBucketBytes);
  EXPECT_EQ(trainerPlan->bucket_count(), 2u);
  EXPECT_EQ(text(trainerPlan->arena()), "arena-segment");
  EXPECT_EQ(trainerPlan->nccl_rank(), -1) << "the shm grant is not ranked";
  const auto* secondPlan = wire_.last<msg::TransferPlan>("w1-conn");
  ASSERT_NE(secondPlan, nullptr);
  EXPECT_EQ(secondPlan->receiver(), 1);
}

TEST_F(RoundMachineTest, VerifyCommitsAndResumesInOrderWhenEveryDigestAgrees) {
  const std::uint64_t round = begin({.version = 3, .label = "step-3"});
  ackAll(round);
  wire_.clear();
  const std::uint64_t bytes = manifest_.totalBytes();
  machine().updateDone(agent("w0-conn"), updateDone(round, true, bytes, kPayloadDigest));
  machine().updateDone(agent("trainer-conn"), updateDone(round, true, bytes, kPayloadDigest));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer) << "worker-1 has not reported";
  machine().updateDone(agent("w1-conn"), updateDone(round, true, bytes, kPayloadDigest));

  EXPECT_EQ(wire_.topics(), (Names{"round/verify", "round/commit", "round/resume", "round/idle"}));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  EXPECT_EQ(block_->committedVersion(), 3u);
  EXPECT_EQ(block_->committedRound(), round);
  EXPECT_FALSE(block_->pauseState().paused);
  EXPECT_EQ(machine().committed().version, 3u);
  EXPECT_EQ(machine().committed().label, "step-3");
  EXPECT_EQ(machine().committed().digest, kPayloadDigest);
  // The trainer hears of the commit first; every worker gets the Commit, then the Resume at the new version.
  EXPECT_EQ(wire_.peersOf<msg::Commit>(), (Names{"trainer-conn", "w0-conn", "w1-conn"}));
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Commit", "Resume"}));
  EXPECT_EQ(wire_.bodiesTo("trainer-conn"), (Names{"Commit"}));
  const auto* commit = wire_.last<msg::Commit>("w1-conn");
  ASSERT_NE(commit, nullptr);
  EXPECT_EQ(commit->version(), 3u);
  EXPECT_EQ(commit->bytes(), bytes);
  EXPECT_EQ(bus::fromMessage(*commit->digest()), kPayloadDigest);
  EXPECT_EQ(text(commit->label()), "step-3");
  EXPECT_EQ(wire_.last<msg::Resume>("w1-conn")->version(), 3u);
  EXPECT_EQ(stats_.roundsCommitted, 1u);
  EXPECT_TRUE(shmLog_.aborted.empty());
  EXPECT_EQ(machine().fateOf(3).fate, msg::VersionFate::Committed);
  EXPECT_EQ(block_->eventsPublished(), wire_.published()) << "the outbox counts its events in the block";
}

TEST_F(RoundMachineTest, ALaterRoundRefersToTheManifestByDigestAndSendsItToNobodyAgain) {
  std::uint64_t round = begin({.version = 1});
  ackAll(round);
  doneAll(round);
  wire_.clear();
  round = begin({.version = 2, .withManifest = false});
  EXPECT_EQ(round, 2u);
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Pause"}));
  // A worker that registers later is sent it once, in its first round.
  addAgent("w2-conn", "worker-2", msg::Role::Worker, 2);
  ackAll(round);
  doneAll(round);
  wire_.clear();
  round = begin({.version = 3, .withManifest = false});
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Pause"}));
  EXPECT_EQ(wire_.bodiesTo("w2-conn"), (Names{"Manifest", "Pause"}));
}

TEST_F(RoundMachineTest, ARoundWithoutWorkersGoesStraightToTransferAndCommits) {
  agents_.remove("w0-conn");
  agents_.remove("w1-conn");
  const std::uint64_t round = begin({.version = 4});
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), (Names{"trainer-conn"}));
  EXPECT_EQ(wire_.last<msg::TransferPlan>("trainer-conn")->receiver_count(), 0u);
  machine().updateDone(agent("trainer-conn"), updateDone(round, true, manifest_.totalBytes(), kPayloadDigest));
  EXPECT_EQ(block_->committedVersion(), 4u);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
}

TEST_F(RoundMachineTest, ADeviceChannelCutsTheGpuBucketsAndRanksTheMembers) {
  const std::uint64_t round = begin({.channel = msg::ChannelKind::Nccl});
  EXPECT_TRUE(shmLog_.prepared.empty());
  ASSERT_EQ(gpuLog_.prepared.size(), 1u);
  ackAll(round);
  const auto* plan = wire_.last<msg::TransferPlan>("w1-conn");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->channel(), msg::ChannelKind::Nccl);
  EXPECT_EQ(plan->bucket_bytes(), kGpuBucketBytes);
  EXPECT_EQ(plan->bucket_count(), 1u);
  EXPECT_EQ(plan->nccl_rank(), 2) << "the trainer is rank 0, receiver i rank i + 1";
  EXPECT_EQ(plan->nccl_world_size(), 3u);
  ASSERT_NE(plan->nccl_unique_id(), nullptr);
  EXPECT_EQ(plan->nccl_unique_id()->size(), 3u);
  EXPECT_EQ(wire_.last<msg::TransferPlan>("trainer-conn")->nccl_rank(), 0);
}

TEST_F(RoundMachineTest, AWorkerThatRegistersDuringARoundJoinsTheNextOne) {
  const std::uint64_t round = begin();
  addAgent("late-conn", "late", msg::Role::Worker, 2);
  ackAll(round);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer) << "the late worker is not waited for";
  EXPECT_TRUE(wire_.bodiesTo("late-conn").empty());
  EXPECT_EQ(machine().current()->participants.size(), 2u);
}

// ---- what a BeginUpdate is refused for: no round starts, nobody pauses ----

struct Refusal {
  msg::ErrorCode code;
  std::string detail;
};

class RoundMachineRefusalTest : public RoundMachineTest {
 protected:
  // The Error the trainer got for its BeginUpdate (seq 7), after checking that nothing else happened.
  Refusal refusal() {
    EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
    EXPECT_FALSE(block_->pauseState().paused);
    EXPECT_TRUE(wire_.bodiesTo("w0-conn").empty());
    EXPECT_TRUE(wire_.events.empty());
    const auto* error = wire_.last<msg::Error>("trainer-conn");
    if (error == nullptr) return Refusal{msg::ErrorCode::None, "no Error was sent"};
    EXPECT_EQ(error->in_reply_to(), 7u);
    return Refusal{error->code(), text(error->detail())};
  }
  void refusedFor(const BeginFields& fields, msg::ErrorCode code, const std::string& part) {
    machine().begin(agent("trainer-conn"), 7, beginUpdate(fields));
    const Refusal got = refusal();
    EXPECT_EQ(got.code, code) << got.detail;
    EXPECT_NE(got.detail.find(part), std::string::npos) << got.detail;
    EXPECT_EQ(stats_.requestsRejected, 1u);
  }
};

TEST_F(RoundMachineRefusalTest, AWorkerCannotBegin) {
  machine().begin(agent("w0-conn"), 7, beginUpdate({}));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* error = wire_.last<msg::Error>("w0-conn");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code(), msg::ErrorCode::NotAllowed);
}

TEST_F(RoundMachineRefusalTest, ASecondRoundWhileOneRunsNamesTheRunningOne) {
  begin({.version = 1});
  wire_.clear();
  machine().begin(agent("trainer-conn"), 7, beginUpdate({.version = 2}));
  const auto* error = wire_.last<msg::Error>("trainer-conn");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code(), msg::ErrorCode::RoundInProgress);
  EXPECT_EQ(text(error->detail()), "round 1 (version 1 from 'trainer') is in phase Pause");
  EXPECT_EQ(machine().current()->version, 1u);
}

TEST_F(RoundMachineRefusalTest, AVersionNotAboveTheCommittedOne) {
  machine().carryOver(CommittedVersion{9, 4, kPayloadDigest, {}}, 6);
  refusedFor({.version = 9}, msg::ErrorCode::VersionNotIncreasing, "not above the committed version 9");
}

TEST_F(RoundMachineRefusalTest, AVersionAboveTheHighestABusTakes) {
  refusedFor({.version = bus::kMaxVersion + 1}, msg::ErrorCode::InvalidField, "above the highest a bus takes");
}

TEST_F(RoundMachineRefusalTest, ALabelThatIsNotPrintable) {
  refusedFor({.label = "bad\x01label"}, msg::ErrorCode::InvalidField, "label");
}

TEST_F(RoundMachineRefusalTest, AManifestNeverSent) {
  refusedFor({.withManifest = false}, msg::ErrorCode::UnknownManifest, "send it with BeginUpdate");
}

TEST_F(RoundMachineRefusalTest, AManifestWhoseDigestIsNotTheRoundsOne) {
  refusedFor({.digest = bus::Digest{1, 1}}, msg::ErrorCode::Malformed, "differs from the round's");
}

TEST_F(RoundMachineRefusalTest, ATotalThatIsNotTheManifests) {
  refusedFor({.totalBytes = 17}, msg::ErrorCode::Malformed, "total_bytes 17 but the manifest has 4352");
}

TEST_F(RoundMachineRefusalTest, AChannelAWorkerDoesNotOfferNamesTheWorker) {
  agents_.remove("w1-conn");
  addAgent("w1-conn", "worker-1", msg::Role::Worker, 1, {msg::ChannelKind::Shm});
  refusedFor({.channel = msg::ChannelKind::Nccl}, msg::ErrorCode::NotAllowed,
             "worker 'worker-1' cannot use channel nccl (it offers shm)");
  EXPECT_TRUE(gpuLog_.prepared.empty());
}

TEST_F(RoundMachineRefusalTest, AChannelThisCoordinatorHasNoOwnerFor) {
  agents_.remove("w0-conn");
  agents_.remove("w1-conn");
  refusedFor({.channel = msg::ChannelKind::Tcp}, msg::ErrorCode::NotAllowed, "unknown to this coordinator");
}

TEST_F(RoundMachineRefusalTest, AnAgentOnAnotherHostOnAChannelThatStaysOnOne) {
  AgentRecord* worker = agents_.find("w1-conn");
  worker->sameHost = false;
  worker->hostname = "elsewhere";
  refusedFor({}, msg::ErrorCode::NotAllowed, "worker 'worker-1' on host 'elsewhere' is on another");
  EXPECT_TRUE(shmLog_.prepared.empty());
}

TEST_F(RoundMachineRefusalTest, WhatTheOwnerRefuses) {
  shmLog_.refuseNextPrepare = "the arena cannot be made";
  refusedFor({}, msg::ErrorCode::NotAllowed, "the arena cannot be made");
  EXPECT_EQ(machine().lastRound(), 0u) << "a refused round takes no number";
}

// ---- every abort path: nothing committed, every worker resumed on the version it had ----

TEST_F(RoundMachineTest, AWorkerThatRefusesToPauseAbortsTheRoundNamingIt) {
  const std::uint64_t round = begin({.version = 2});
  machine().pauseAck(agent("w0-conn"), pauseAck(round, true));
  machine().pauseAck(agent("w1-conn"),
                     pauseAck(round, false, msg::AbortReason::ManifestMismatch, "tensor 'head' is bound as F32"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ManifestMismatch);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-1' refused to pause: tensor 'head' is bound as F32");
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  EXPECT_EQ(wire_.topics(), (Names{"round/begin", "round/pause", "round/abort", "round/resume", "round/idle"}));
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), Names{});
  expectAbortedAndResumed(round, 2, false, msg::AbortReason::ManifestMismatch);
}

TEST_F(RoundMachineTest, ARefusalWithoutAReasonCountsAsRefused) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::AgentRefused);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-0' refused to pause: no reason given");
}

TEST_F(RoundMachineTest, AWorkerLackingTheManifestIsSentItAndThePauseAgainOnce) {
  const std::uint64_t round = begin();
  wire_.clear();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false, msg::AbortReason::ManifestMismatch, "unknown", true));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause) << "no abort for a manifest the coordinator can resend";
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Manifest", "Pause"}));
  EXPECT_TRUE(wire_.bodiesTo("w1-conn").empty());
  EXPECT_EQ(wire_.last<msg::Pause>("w0-conn")->round(), round);
  EXPECT_TRUE(machine().current()->participants[0].manifestResent);
  // Once in a round: a second "unknown" is a refusal like any other.
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false, msg::AbortReason::ManifestMismatch, "unknown", true));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ManifestMismatch);
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::ManifestMismatch);
}

TEST_F(RoundMachineTest, AResentManifestThenAnAckGoesOnToTransfer) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false, msg::AbortReason::None, "evicted", true));
  ackAll(round);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  doneAll(round);
  EXPECT_EQ(block_->committedVersion(), 1u);
}

TEST_F(RoundMachineTest, APauseDeadlineAbortsNamingOnlyTheWorkersThatDidNotAck) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, true));
  clock_.advance(options_.pauseTimeout - 1ms);
  machine().checkDeadline();
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause) << "a millisecond before the pause timeout";
  clock_.advance(1ms);
  machine().checkDeadline();
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Timeout);
  EXPECT_EQ(text(abort->detail()), "phase Pause ran past its timeout; waiting for 'worker-1'");
  EXPECT_EQ(text(abort->agent_id()), "");
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::Timeout);
}

TEST_F(RoundMachineTest, ATransferDeadlineCountsFromTheTransferAndAddsASecondPerGiB) {
  const std::uint64_t round = begin();
  clock_.advance(options_.pauseTimeout - 1ms);  // the pause's time does not count against the transfer's
  ackAll(round);
  machine().updateDone(agent("w0-conn"), updateDone(round, true, manifest_.totalBytes(), kPayloadDigest));
  // The manifest is under 1 GiB, which counts as one.
  clock_.advance(options_.transferTimeout + kTransferTimeoutPerGiB - 1ms);
  machine().checkDeadline();
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  clock_.advance(1ms);
  machine().checkDeadline();
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Timeout);
  EXPECT_EQ(text(abort->detail()), "phase Transfer ran past its timeout; waiting for 'worker-1', trainer 'trainer'");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::Timeout);
}

TEST_F(RoundMachineTest, NoDeadlineWithoutARoundAndNoneAfterItEnded) {
  machine().checkDeadline();
  const std::uint64_t round = begin();
  ackAll(round);
  doneAll(round);
  clock_.advance(24h);
  machine().checkDeadline();
  EXPECT_EQ(stats_.roundsAborted, 0u);
  EXPECT_EQ(block_->committedVersion(), 1u);
}

TEST_F(RoundMachineTest, ATransferFailureOfTheTrainerAbortsNamingIt) {
  const std::uint64_t round = begin();
  ackAll(round);
  machine().updateDone(agent("trainer-conn"), updateDone(round, false, 0, {}, msg::AbortReason::None, "bucket 1"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ChannelFailure);
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer' failed the transfer: bucket 1");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::ChannelFailure);
}

TEST_F(RoundMachineTest, ATransferFailureOfAWorkerKeepsItsReason) {
  const std::uint64_t round = begin();
  ackAll(round);
  machine().updateDone(agent("w1-conn"), updateDone(round, false, 0, {}, msg::AbortReason::Timeout, "stalled"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Timeout);
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::Timeout);
}

TEST_F(RoundMachineTest, ADigestMismatchAbortsInVerifyAndCommitsNothing) {
  const std::uint64_t round = begin();
  ackAll(round);
  doneAll(round, kSpoiledDigest);
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::DigestMismatch);
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  EXPECT_NE(text(abort->detail()).find("worker 'worker-1' received bytes with digest"), std::string::npos);
  EXPECT_EQ(wire_.peersOf<msg::Commit>(), Names{});
  const Names topics = wire_.topics();
  EXPECT_EQ(Names(topics.end() - 4, topics.end()),
            (Names{"round/verify", "round/abort", "round/resume", "round/idle"}));
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::DigestMismatch);
}

TEST_F(RoundMachineTest, AWorkerThatReceivedAnotherByteCountAbortsInVerify) {
  const std::uint64_t round = begin();
  ackAll(round);
  const std::uint64_t bytes = manifest_.totalBytes();
  machine().updateDone(agent("w0-conn"), updateDone(round, true, bytes - 256, kPayloadDigest));
  machine().updateDone(agent("w1-conn"), updateDone(round, true, bytes, kPayloadDigest));
  machine().updateDone(agent("trainer-conn"), updateDone(round, true, bytes, kPayloadDigest));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ByteCountMismatch);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-0' received 4096 bytes, the trainer sent 4352");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::ByteCountMismatch);
}

TEST_F(RoundMachineTest, ATrainerThatSentAnotherByteCountThanTheManifestAbortsInVerify) {
  const std::uint64_t round = begin();
  ackAll(round);
  for (const char* agentConn : {"w0-conn", "w1-conn", "trainer-conn"}) {
    machine().updateDone(agent(agentConn), updateDone(round, true, 100, kPayloadDigest));
  }
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ByteCountMismatch);
  EXPECT_EQ(text(abort->agent_id()), "trainer");
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer' sent 100 bytes, the manifest has 4352");
}

TEST_F(RoundMachineTest, AWorkerLostInPauseAbortsAndIsNotSentTheAbortOrTheResume) {
  const std::uint64_t round = begin();
  wire_.clear();
  // The coordinator removes a dead agent from the registry, then tells the machine.
  const auto gone = agents_.remove("w1-conn");
  ASSERT_TRUE(gone.has_value());
  machine().agentGone(*gone, "its heartbeat is 2000 ms old");
  EXPECT_TRUE(wire_.bodiesTo("w1-conn").empty());
  ASSERT_NE(wire_.last<msg::Abort>("trainer-conn"), nullptr);
  const auto* abort = wire_.last<msg::Abort>("w0-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::AgentDied);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-1': its heartbeat is 2000 ms old");
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::AgentDied);
}

TEST_F(RoundMachineTest, AWorkerLostMidTransferAbortsTheTransfer) {
  const std::uint64_t round = begin();
  ackAll(round);
  machine().updateDone(agent("w1-conn"), updateDone(round, true, manifest_.totalBytes(), kPayloadDigest));
  const auto gone = agents_.remove("w0-conn");
  machine().agentGone(*gone, "its process is gone");
  EXPECT_EQ(wire_.last<msg::Abort>("w1-conn")->reason(), msg::AbortReason::AgentDied);
  EXPECT_EQ(wire_.last<msg::Abort>("w0-conn"), nullptr);
  EXPECT_EQ(wire_.last<msg::Resume>("w0-conn"), nullptr);
  EXPECT_EQ(shmLog_.aborted, (std::vector<test::FakeChannelOwnerLog::Aborted>{{round, true}}));
  EXPECT_EQ(block_->committedVersion(), 0u);
}

TEST_F(RoundMachineTest, TheTrainerLostMidTransferAbortsAndEveryWorkerResumes) {
  const std::uint64_t round = begin();
  ackAll(round);
  const auto gone = agents_.remove("trainer-conn");
  machine().agentGone(*gone, "it said goodbye");
  EXPECT_EQ(wire_.last<msg::Abort>("trainer-conn"), nullptr);
  const auto* abort = wire_.last<msg::Abort>("w0-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::AgentDied);
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer': it said goodbye");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::AgentDied);
}

TEST_F(RoundMachineTest, AnAgentOutsideTheRoundLeavingChangesNothing) {
  begin();
  const AgentRecord& late = addAgent("late-conn", "late", msg::Role::Worker, 2);
  const AgentRecord copy = late;
  agents_.remove("late-conn");
  machine().agentGone(copy, "it said goodbye");
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  machine().agentGone(agent("w0-conn"), "gone");
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  machine().agentGone(agent("w1-conn"), "gone as well");  // no round: nothing to abort
  EXPECT_EQ(stats_.roundsAborted, 1u);
}

TEST_F(RoundMachineTest, TheTrainersCancelAbortsAsRequested) {
  const std::uint64_t round = begin();
  ackAll(round);
  // Only the round's trainer, and only for its round.
  machine().trainerAbort(agent("w0-conn"), trainerCancel(round, "not mine to cancel"));
  machine().trainerAbort(agent("trainer-conn"), trainerCancel(round + 1, "another round"));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  machine().trainerAbort(agent("trainer-conn"), trainerCancel(round, "the loss went NaN"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Requested);
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer' cancelled: the loss went NaN");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::Requested);
}

TEST_F(RoundMachineTest, AnOperatorsAbortEndsARoundAndSaysWhenThereIsNone) {
  EXPECT_FALSE(machine().abort(msg::AbortReason::Requested, "an operator aborted the round"));
  const std::uint64_t round = begin();
  EXPECT_TRUE(machine().abort(msg::AbortReason::CoordinatorRestart, "the coordinator is stopping"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::CoordinatorRestart);
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::CoordinatorRestart);
}

TEST_F(RoundMachineTest, MessagesOfAnotherRoundOrPhaseOrAgentAreIgnored) {
  const std::uint64_t round = begin();
  addAgent("late-conn", "late", msg::Role::Worker, 2);
  machine().pauseAck(agent("w0-conn"), pauseAck(round + 1, false));         // another round's
  machine().pauseAck(agent("late-conn"), pauseAck(round, false));           // not a participant
  machine().updateDone(agent("w0-conn"), updateDone(round, false, 0, {}));  // not in Transfer yet
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  ackAll(round);
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false));  // a late refusal of a pause already acked
  machine().updateDone(agent("w0-conn"), updateDone(round + 1, false, 0, {}));
  machine().updateDone(agent("late-conn"), updateDone(round, false, 0, {}));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  EXPECT_EQ(stats_.roundsAborted, 0u);
}

// ---- the outbox's side: an agent a command cannot reach ----

TEST_F(RoundMachineTest, AWorkerThePauseCannotReachIsNotedForTheCoordinatorToDrop) {
  wire_.unreachable.push_back("w1-conn");
  begin();
  const std::vector<Unreachable> gone = outbox_->takeUnreachable();
  ASSERT_EQ(gone.size(), 1u) << "once, although the Manifest and the Pause both failed";
  EXPECT_EQ(gone[0].routingId, "w1-conn");
  EXPECT_NE(gone[0].why.find("its connection is gone"), std::string::npos);
  // What the coordinator then does: removes it, and the round aborts on its departure.
  const auto removed = agents_.remove("w1-conn");
  machine().agentGone(*removed, gone[0].why);
  EXPECT_EQ(wire_.last<msg::Abort>("w0-conn")->reason(), msg::AbortReason::AgentDied);
}

// ---- the coordinator around it: faults, versions carried over, fates ----

TEST_F(RoundMachineTest, TheFaultHookIsCalledAtEveryPointAndAnOutageCutsTheRequestEndpoint) {
  faultHook_->outageAt = bus::FaultPoint::Commit;
  const std::uint64_t round = begin({.version = 6});
  ackAll(round);
  doneAll(round);
  EXPECT_EQ(faultHook_->reachedPoints, (Names{"begin@6", "pause@6", "transfer@6", "verify@6", "commit@6", "resume@6"}));
  EXPECT_EQ(cuts_, (Names{"250 ms: test fault at commit"}));
  EXPECT_EQ(block_->committedVersion(), 6u) << "the commit goes on: the machine only asks for the cut";
}

TEST_F(RoundMachineTest, AnAbortedRoundReachesResumeButNotVerifyOrCommit) {
  const std::uint64_t round = begin({.version = 2});
  ackAll(round);
  machine().trainerAbort(agent("trainer-conn"), trainerCancel(round, "stop"));
  EXPECT_EQ(faultHook_->reachedPoints, (Names{"begin@2", "pause@2", "transfer@2", "resume@2"}));
  EXPECT_TRUE(cuts_.empty());
}

TEST_F(RoundMachineTest, ACarriedOverVersionAndRoundNumberGoOn) {
  machine().carryOver(CommittedVersion{9, 4, kPayloadDigest, "old"}, 6);
  EXPECT_EQ(machine().committed().version, 9u);
  EXPECT_EQ(machine().lastRound(), 6u);
  EXPECT_EQ(machine().fateOf(9).fate, msg::VersionFate::Committed);
  EXPECT_EQ(machine().fateOf(9).round, 4u);
  const std::uint64_t round = begin({.version = 10});
  EXPECT_EQ(round, 7u);
  machine().abort(msg::AbortReason::Requested, "operator");
  EXPECT_EQ(wire_.last<msg::Resume>("w0-conn")->version(), 9u) << "resumed on the carried-over version";
}

TEST_F(RoundMachineTest, TheFateOfVersionsNeverSeen) {
  machine().carryOver(CommittedVersion{9, 4, kPayloadDigest, {}}, 4);
  EXPECT_EQ(machine().fateOf(12).fate, msg::VersionFate::NotCommitted);
  EXPECT_EQ(machine().fateOf(12).reason, msg::AbortReason::Lost);
  EXPECT_EQ(machine().fateOf(3).fate, msg::VersionFate::Superseded);
}

}  // namespace
}  // namespace wsync::coordinator
