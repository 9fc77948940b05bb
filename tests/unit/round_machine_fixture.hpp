#pragma once
// The round machine's test fixture (round_machine_test.cpp, region_round_test.cpp): the machine alone, in one
// thread, its outbox writing to a recording wire, its channels fake owners, its clock moved by hand, its agents
// records in a real registry.
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
#include "wsync/bus/protocol/region_message.hpp"
#include "wsync/bus/state/control_block.hpp"

namespace wsync::coordinator::round_test {

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

inline std::string text(const flatbuffers::String* value) { return value != nullptr ? value->str() : std::string(); }

inline bus::Manifest twoTensors() {
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
  // A region round's (docs/regions.md): this rank of `sourceCount`, holding `holdings` (sent with the BeginUpdate
  // unless `holdingsByDigest`); none: the whole manifest, undeclared.
  std::uint32_t sourceRank = 0;
  std::uint32_t sourceCount = 1;
  std::optional<bus::SourceHoldings> holdings{};
  bool holdingsByDigest = false;
};

inline flatbuffers::Offset<flatbuffers::String> optionalString(flatbuffers::FlatBufferBuilder& fbb,
                                                               const std::string& value) {
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
    const msg::Digest128 holdingsDigest =
        bus::toMessage(fields.holdings ? bus::digestOf(*fields.holdings) : bus::Digest{});
    const auto holdings = fields.holdings && !fields.holdingsByDigest
                              ? bus::toMessage(fbb, *fields.holdings, manifest_.digest())
                              : flatbuffers::Offset<msg::Holdings>{};
    fbb.Finish(msg::CreateBeginUpdate(fbb, fields.version, label, &digest, manifest, fields.channel, fields.mode,
                                      fields.totalBytes.value_or(manifest_.totalBytes()), fields.sourceRank,
                                      fields.sourceCount, fields.holdings ? &holdingsDigest : nullptr, holdings));
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
  // A region round's report: what this agent moved with each peer.
  const msg::UpdateDone& pairsDone(std::uint64_t round, const bus::RegionTransferResult& pairs) {
    auto& fbb = resetBuilder();
    const auto entries = bus::toMessage(fbb, pairs);
    fbb.Finish(msg::CreateUpdateDone(fbb, round, 0, true, 0, nullptr, msg::AbortReason::None, 0, entries));
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
                                     bus::ChannelGrant{"arena-segment", {}, {}, false, {}}};
  test::FakeChannelTraits gpuTraits_{msg::ChannelKind::Nccl, bus::TensorMemory::Device, true, 64,
                                     bus::ChannelGrant{{}, {1, 2, 3}, {}, true, {}}};
  test::FakeChannelOwnerLog shmLog_;
  test::FakeChannelOwnerLog gpuLog_;
  bus::Manifest manifest_;
  flatbuffers::FlatBufferBuilder builder_{1024};
  std::unique_ptr<RoundMachine> machine_;
};

}  // namespace wsync::coordinator::round_test
