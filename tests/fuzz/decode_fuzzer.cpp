// libFuzzer target for control-message decoding (verifyMessage, Message::decode). Every buffer that verifies is
// walked field by field, strings byte by byte, so that a read the Verifier failed to bound is caught by ASan, and
// every enum field of it must hold a declared value; the decoders' answers are checked against each other. Built
// with -fsanitize=fuzzer when WSYNC_FUZZ is ON, and linked with corpus_runner.cpp into a plain program that replays
// the corpus in every test run.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <wsync/schemas/control_generated.h>
#include <zmq.hpp>

#include "fuzz_check.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/protocol.hpp"

namespace {

namespace msg = wsync::msg;
using wsync::bus::Message;
using wsync::bus::MessageError;

// Every field of a table must be walked below. The generated CreateXxx() takes the builder and one argument per
// field, so a field appended to schemas/control.fbs breaks these asserts until its walk is added here.
template <typename Result, typename... Args>
constexpr std::size_t fieldCount(Result (*)(flatbuffers::FlatBufferBuilder&, Args...)) {
  return sizeof...(Args);
}
static_assert(fieldCount(&msg::CreateEnvelope) == 6);  // the union counts twice: body_type and body
static_assert(fieldCount(&msg::CreateChannelContact) == 2);
static_assert(fieldCount(&msg::CreateAgentHello) == 13);
static_assert(fieldCount(&msg::CreateWelcome) == 21);
static_assert(fieldCount(&msg::CreateHeartbeat) == 1);
static_assert(fieldCount(&msg::CreateTensorInfo) == 3);
static_assert(fieldCount(&msg::CreateManifest) == 3);
static_assert(fieldCount(&msg::CreateBeginUpdate) == 11);
static_assert(fieldCount(&msg::CreateRegion) == 3);
static_assert(fieldCount(&msg::CreateHoldings) == 3);
static_assert(fieldCount(&msg::CreateLocalTensorInfo) == 3);
static_assert(fieldCount(&msg::CreateBoundRegionInfo) == 6);
static_assert(fieldCount(&msg::CreateBindings) == 3);
static_assert(fieldCount(&msg::CreatePairDone) == 2);
static_assert(fieldCount(&msg::CreatePause) == 4);
static_assert(fieldCount(&msg::CreatePauseAck) == 6);
static_assert(fieldCount(&msg::CreateTransferPlan) == 21);
static_assert(fieldCount(&msg::CreateUpdateDone) == 8);
static_assert(fieldCount(&msg::CreateCommit) == 6);
static_assert(fieldCount(&msg::CreateAbort) == 5);
static_assert(fieldCount(&msg::CreateResume) == 2);
static_assert(fieldCount(&msg::CreateSnapshotRequest) == 0);
static_assert(fieldCount(&msg::CreateAgentInfo) == 9);
static_assert(fieldCount(&msg::CreateTopicSequence) == 2);
static_assert(fieldCount(&msg::CreateSnapshotReply) == 14);
static_assert(fieldCount(&msg::CreateError) == 4);
static_assert(fieldCount(&msg::CreateAgentEvent) == 3);
static_assert(fieldCount(&msg::CreateRoundTransition) == 6);
static_assert(fieldCount(&msg::CreateGoodbye) == 1);
static_assert(fieldCount(&msg::CreateCoordinatorBeat) == 8);
static_assert(fieldCount(&msg::CreateControlRequest) == 4);
static_assert(fieldCount(&msg::CreateControlReply) == 2);
static_assert(fieldCount(&msg::CreateVersionQuery) == 1);
static_assert(fieldCount(&msg::CreateVersionReport) == 6);
static_assert(fieldCount(&msg::CreateOperatorPause) == 1);
static_assert(fieldCount(&msg::CreateOperatorResume) == 0);
static_assert(fieldCount(&msg::CreateSlotReport) == 7);
static_assert(msg::Body::MAX == msg::Body::Bindings, "a new Body member needs a case in walkBody()");

// Folds everything the walk reads into one value (FNV-1a over 64-bit words), so that no read can be optimised
// away and two walks of the same message can be compared.
class Fold {
 public:
  template <typename Scalar>
  requires std::is_arithmetic_v<Scalar>
  void add(Scalar value) { mix(static_cast<std::uint64_t>(value)); }

  // Enums are folded by value and by name: the generated EnumNameXxx() must bound any value a peer sends. It answers
  // "" for a value its enum does not declare: a message that decodes has none (MessageError::EnumOutOfRange), and
  // one refused for it has at least one. This walk is written by hand, the decoder's follows mini-reflection
  // tables, so each checks the other.
  template <typename Enum>
  requires std::is_enum_v<Enum>
  void add(Enum value, const char* name) {
    add(static_cast<std::underlying_type_t<Enum>>(value));
    WSYNC_FUZZ_CHECK(name != nullptr);
    if (*name == '\0') ++undeclaredEnums_;
    addBytes(std::string_view(name));
  }

  void add(const flatbuffers::String* text) {
    if (text == nullptr) {
      mix(kAbsent);
      return;
    }
    const std::size_t size = text->size();
    addBytes(std::string_view(text->c_str(), size));
    // The Verifier promises the terminator lies inside the buffer.
    WSYNC_FUZZ_CHECK(text->c_str()[size] == '\0');
  }

  void add(const msg::Digest128* digest) {
    if (digest == nullptr) {
      mix(kAbsent);
      return;
    }
    add(digest->lo());
    add(digest->hi());
  }

  template <typename Scalar>
  requires std::is_arithmetic_v<Scalar>
  void add(const flatbuffers::Vector<Scalar>* values) {
    if (values == nullptr) {
      mix(kAbsent);
      return;
    }
    // Elements are read in place, so they must be aligned for their type (the buffer itself is): a long vector
    // 4 bytes off passes the FlatBuffers Verifier (google/flatbuffers#8397), so the decoder has to refuse it. An
    // empty one may be off (FlatBufferBuilder 2.0.8 writes it so): nothing is read from it.
    WSYNC_FUZZ_CHECK(values->size() == 0 || reinterpret_cast<std::uintptr_t>(values->data()) % alignof(Scalar) == 0);
    add(values->size());
    for (const Scalar value : *values) add(value);
  }

  void addAbsent() { mix(kAbsent); }
  std::uint64_t value() const { return state_; }
  std::size_t undeclaredEnums() const { return undeclaredEnums_; }

 private:
  // Distinguishes an absent string, vector or struct from an empty or zero one.
  static constexpr std::uint64_t kAbsent = 0xabad'1dea'abad'1deaULL;

  void mix(std::uint64_t word) {
    state_ ^= word;
    state_ *= 0x0000'0100'0000'01b3ULL;  // FNV-1a 64-bit prime
  }

  void addBytes(std::string_view bytes) {
    add(bytes.size());
    for (const char c : bytes) mix(static_cast<unsigned char>(c));
  }

  std::uint64_t state_ = 0xcbf2'9ce4'8422'2325ULL;  // FNV-1a 64-bit offset basis
  std::size_t undeclaredEnums_ = 0;
};

void walk(const msg::Region& region, Fold& fold) {
  fold.add(region.tensor());
  fold.add(region.offset());
  fold.add(region.extent());
}

void walk(const msg::Holdings& holdings, Fold& fold) {
  fold.add(holdings.digest());
  fold.add(holdings.manifest_digest());
  if (const auto* regions = holdings.regions()) {
    fold.add(regions->size());
    for (const msg::Region* region : *regions) {
      WSYNC_FUZZ_CHECK(region != nullptr);
      walk(*region, fold);
    }
  } else {
    fold.addAbsent();
  }
}

void walk(const msg::LocalTensorInfo& local, Fold& fold) {
  WSYNC_FUZZ_CHECK(local.name() != nullptr);  // required
  fold.add(local.name());
  fold.add(local.dtype(), msg::EnumNameDType(local.dtype()));
  fold.add(local.shape());
}

void walk(const msg::BoundRegionInfo& bound, Fold& fold) {
  WSYNC_FUZZ_CHECK(bound.tensor() != nullptr);  // required
  fold.add(bound.tensor());
  fold.add(bound.offset());
  fold.add(bound.extent());
  fold.add(bound.local());
  fold.add(bound.local_offset());
  fold.add(bound.local_extent());
}

void walk(const msg::Bindings& bindings, Fold& fold) {
  fold.add(bindings.digest());
  if (const auto* locals = bindings.locals()) {
    fold.add(locals->size());
    for (const msg::LocalTensorInfo* local : *locals) {
      WSYNC_FUZZ_CHECK(local != nullptr);
      walk(*local, fold);
    }
  } else {
    fold.addAbsent();
  }
  if (const auto* regions = bindings.regions()) {
    fold.add(regions->size());
    for (const msg::BoundRegionInfo* bound : *regions) {
      WSYNC_FUZZ_CHECK(bound != nullptr);
      walk(*bound, fold);
    }
  } else {
    fold.addAbsent();
  }
}

void walk(const msg::AgentHello& hello, Fold& fold) {
  WSYNC_FUZZ_CHECK(hello.agent_id() != nullptr);  // required: the Verifier refuses a hello without one
  fold.add(hello.agent_id());
  fold.add(hello.role(), msg::EnumNameRole(hello.role()));
  fold.add(hello.protocol_version());
  fold.add(hello.requested_rank());
  fold.add(hello.group_size());
  fold.add(hello.pid());
  fold.add(hello.hostname());
  if (const auto* channels = hello.channels()) {
    fold.add(channels->size());
    for (const msg::ChannelKind channel : *channels) fold.add(channel, msg::EnumNameChannelKind(channel));
  } else {
    fold.addAbsent();
  }
  fold.add(hello.applied_version());
  fold.add(hello.host_key());
  if (const auto* contacts = hello.channel_contacts()) {
    fold.add(contacts->size());
    for (const msg::ChannelContact* contact : *contacts) {
      WSYNC_FUZZ_CHECK(contact != nullptr);  // the Verifier checked every element's offset
      fold.add(contact->kind(), msg::EnumNameChannelKind(contact->kind()));
      fold.add(contact->address());
    }
  } else {
    fold.addAbsent();
  }
  fold.add(hello.registration_secret());
  if (const msg::Bindings* bindings = hello.bindings()) {
    walk(*bindings, fold);
  } else {
    fold.addAbsent();
  }
}

void walk(const msg::Welcome& welcome, Fold& fold) {
  fold.add(welcome.agent_id());
  fold.add(welcome.slot());
  fold.add(welcome.rank());
  fold.add(welcome.world_size());
  fold.add(welcome.epoch());
  fold.add(welcome.committed_version());
  fold.add(welcome.heartbeat_interval_ms());
  fold.add(welcome.heartbeat_timeout_ms());
  fold.add(welcome.control_block());
  fold.add(welcome.committed_round());
  fold.add(welcome.committed_digest());
  fold.add(welcome.pause_timeout_ms());
  fold.add(welcome.transfer_timeout_ms());
  fold.add(welcome.transfer_timeout_per_gib_ms());
  fold.add(welcome.operator_paused());
  fold.add(welcome.operator_pause_mode(), msg::EnumNamePauseMode(welcome.operator_pause_mode()));
  fold.add(welcome.host_key());
  fold.add(welcome.hostname());
  fold.add(welcome.registration_secret());
  fold.add(welcome.committed_receiver_digest());
  fold.add(welcome.sources_timeout_ms());
}

void walk(const msg::Heartbeat& heartbeat, Fold& fold) { fold.add(heartbeat.applied_version()); }

void walk(const msg::TensorInfo& tensor, Fold& fold) {
  WSYNC_FUZZ_CHECK(tensor.name() != nullptr);  // required
  fold.add(tensor.name());
  fold.add(tensor.dtype(), msg::EnumNameDType(tensor.dtype()));
  fold.add(tensor.shape());
}

void walk(const msg::Manifest& manifest, Fold& fold) {
  fold.add(manifest.digest());
  if (const auto* tensors = manifest.tensors()) {
    fold.add(tensors->size());
    for (const msg::TensorInfo* tensor : *tensors) {
      WSYNC_FUZZ_CHECK(tensor != nullptr);  // the Verifier checked every element's offset
      walk(*tensor, fold);
    }
  } else {
    fold.addAbsent();
  }
  fold.add(manifest.total_bytes());
}

void walk(const msg::BeginUpdate& begin, Fold& fold) {
  fold.add(begin.version());
  fold.add(begin.label());
  fold.add(begin.manifest_digest());
  if (const msg::Manifest* manifest = begin.manifest()) {
    walk(*manifest, fold);
  } else {
    fold.addAbsent();
  }
  fold.add(begin.channel(), msg::EnumNameChannelKind(begin.channel()));
  fold.add(begin.pause_mode(), msg::EnumNamePauseMode(begin.pause_mode()));
  fold.add(begin.total_bytes());
  fold.add(begin.source_rank());
  fold.add(begin.source_count());
  fold.add(begin.holdings_digest());
  if (const msg::Holdings* holdings = begin.holdings()) {
    walk(*holdings, fold);
  } else {
    fold.addAbsent();
  }
}

void walk(const msg::Pause& pause, Fold& fold) {
  fold.add(pause.round());
  fold.add(pause.version());
  fold.add(pause.mode(), msg::EnumNamePauseMode(pause.mode()));
  fold.add(pause.manifest_digest());
}

void walk(const msg::PauseAck& ack, Fold& fold) {
  fold.add(ack.round());
  fold.add(ack.ok());
  fold.add(ack.applied_version());
  fold.add(ack.reason(), msg::EnumNameAbortReason(ack.reason()));
  fold.add(ack.detail());
  fold.add(ack.manifest_unknown());
}

void walk(const msg::TransferPlan& plan, Fold& fold) {
  fold.add(plan.round());
  fold.add(plan.version());
  fold.add(plan.channel(), msg::EnumNameChannelKind(plan.channel()));
  fold.add(plan.manifest_digest());
  fold.add(plan.total_bytes());
  fold.add(plan.bucket_bytes());
  fold.add(plan.bucket_count());
  fold.add(plan.buffer_count());
  fold.add(plan.alignment());
  fold.add(plan.arena());
  fold.add(plan.nccl_unique_id());
  fold.add(plan.nccl_rank());
  fold.add(plan.nccl_world_size());
  fold.add(plan.receiver());
  fold.add(plan.receiver_count());
  fold.add(plan.sender_contact());
  fold.add(plan.regions());
  fold.add(plan.source());
  for (const auto* digests : {plan.holdings_digests(), plan.bindings_digests()}) {
    if (digests == nullptr) {
      fold.addAbsent();
      continue;
    }
    fold.add(digests->size());
    for (const msg::Digest128* digest : *digests) fold.add(digest);
  }
  if (const auto* contacts = plan.source_contacts()) {
    fold.add(contacts->size());
    for (const flatbuffers::String* contact : *contacts) {
      WSYNC_FUZZ_CHECK(contact != nullptr);
      fold.add(contact);
    }
  } else {
    fold.addAbsent();
  }
}

void walk(const msg::PairDone& pair, Fold& fold) {
  fold.add(pair.bytes());
  fold.add(pair.digest());
}

void walk(const msg::UpdateDone& done, Fold& fold) {
  fold.add(done.round());
  fold.add(done.version());
  fold.add(done.ok());
  fold.add(done.bytes());
  fold.add(done.digest());
  fold.add(done.reason(), msg::EnumNameAbortReason(done.reason()));
  fold.add(done.detail());
  if (const auto* pairs = done.pairs()) {
    fold.add(pairs->size());
    for (const msg::PairDone* pair : *pairs) {
      WSYNC_FUZZ_CHECK(pair != nullptr);
      walk(*pair, fold);
    }
  } else {
    fold.addAbsent();
  }
}

void walk(const msg::Commit& commit, Fold& fold) {
  fold.add(commit.round());
  fold.add(commit.version());
  fold.add(commit.label());
  fold.add(commit.bytes());
  fold.add(commit.digest());
  fold.add(commit.receiver_digest());
}

void walk(const msg::Abort& abort, Fold& fold) {
  fold.add(abort.round());
  fold.add(abort.version());
  fold.add(abort.reason(), msg::EnumNameAbortReason(abort.reason()));
  fold.add(abort.detail());
  fold.add(abort.agent_id());
}

void walk(const msg::Resume& resume, Fold& fold) {
  fold.add(resume.round());
  fold.add(resume.version());
}

void walk(const msg::SnapshotRequest& /*request: no fields*/, Fold& /*fold*/) {}

void walk(const msg::AgentInfo& agent, Fold& fold) {
  fold.add(agent.agent_id());
  fold.add(agent.role(), msg::EnumNameRole(agent.role()));
  fold.add(agent.slot());
  fold.add(agent.rank());
  fold.add(agent.applied_version());
  fold.add(agent.last_heartbeat_age_ms());
  fold.add(agent.state(), msg::EnumNameAgentState(agent.state()));
  fold.add(agent.transfer_round());
  fold.add(agent.transfer_bytes());
}

void walk(const msg::TopicSequence& sequence, Fold& fold) {
  fold.add(sequence.family());
  fold.add(sequence.seq());
}

void walk(const msg::SnapshotReply& snapshot, Fold& fold) {
  if (const auto* sequences = snapshot.event_sequences()) {
    fold.add(sequences->size());
    for (const msg::TopicSequence* sequence : *sequences) walk(*sequence, fold);
  }
  fold.add(snapshot.epoch());
  fold.add(snapshot.committed_version());
  fold.add(snapshot.committed_label());
  fold.add(snapshot.phase(), msg::EnumNameRoundPhase(snapshot.phase()));
  fold.add(snapshot.round());
  fold.add(snapshot.round_version());
  fold.add(snapshot.pause_mode(), msg::EnumNamePauseMode(snapshot.pause_mode()));
  fold.add(snapshot.paused());
  fold.add(snapshot.manifest_digest());
  if (const auto* agents = snapshot.agents()) {
    fold.add(agents->size());
    for (const msg::AgentInfo* agent : *agents) {
      WSYNC_FUZZ_CHECK(agent != nullptr);
      walk(*agent, fold);
    }
  } else {
    fold.addAbsent();
  }
  fold.add(snapshot.round_bytes());
  fold.add(snapshot.operator_paused());
  fold.add(snapshot.operator_pause_mode(), msg::EnumNamePauseMode(snapshot.operator_pause_mode()));
}

void walk(const msg::AgentEvent& event, Fold& fold) {
  fold.add(event.kind(), msg::EnumNameAgentEventKind(event.kind()));
  if (const msg::AgentInfo* agent = event.agent()) walk(*agent, fold);
  fold.add(event.detail());
}

void walk(const msg::RoundTransition& transition, Fold& fold) {
  fold.add(transition.round());
  fold.add(transition.version());
  fold.add(transition.phase(), msg::EnumNameRoundPhase(transition.phase()));
  fold.add(transition.participants());
  fold.add(transition.detail());
  fold.add(transition.total_bytes());
}

void walk(const msg::Goodbye& goodbye, Fold& fold) { fold.add(goodbye.reason()); }

void walk(const msg::ControlRequest& request, Fold& fold) {
  fold.add(request.action(), msg::EnumNameControlAction(request.action()));
  fold.add(request.pause_mode(), msg::EnumNamePauseMode(request.pause_mode()));
  fold.add(request.agent_id());
  fold.add(request.reason());
}

void walk(const msg::ControlReply& reply, Fold& fold) {
  fold.add(reply.action(), msg::EnumNameControlAction(reply.action()));
  fold.add(reply.detail());
}

void walk(const msg::CoordinatorBeat& beat, Fold& fold) {
  fold.add(beat.committed_version());
  fold.add(beat.round());
  fold.add(beat.phase(), msg::EnumNameRoundPhase(beat.phase()));
  fold.add(beat.agents());
  fold.add(beat.workers());
  fold.add(beat.paused());
  fold.add(beat.pause_mode(), msg::EnumNamePauseMode(beat.pause_mode()));
  fold.add(beat.pause_round());
}

void walk(const msg::Error& error, Fold& fold) {
  fold.add(error.code(), msg::EnumNameErrorCode(error.code()));
  fold.add(error.detail());
  fold.add(error.in_reply_to());
  fold.add(error.committed_version());
}

void walk(const msg::VersionQuery& query, Fold& fold) { fold.add(query.version()); }

void walk(const msg::VersionReport& report, Fold& fold) {
  fold.add(report.version());
  fold.add(report.fate(), msg::EnumNameVersionFate(report.fate()));
  fold.add(report.round());
  fold.add(report.reason(), msg::EnumNameAbortReason(report.reason()));
  fold.add(report.detail());
  fold.add(report.committed_version());
}

void walk(const msg::OperatorPause& pause, Fold& fold) { fold.add(pause.mode(), msg::EnumNamePauseMode(pause.mode())); }

void walk(const msg::OperatorResume& /*resume*/, Fold& /*fold*/) {}

void walk(const msg::SlotReport& report, Fold& fold) {
  WSYNC_FUZZ_CHECK(report.agent_id() != nullptr);  // required
  fold.add(report.agent_id());
  fold.add(report.slot());
  fold.add(report.applied_version());
  fold.add(report.state(), msg::EnumNameAgentState(report.state()));
  fold.add(report.transfer_round());
  fold.add(report.transfer_bytes());
  fold.add(report.registration_secret());
}

template <typename Body>
void walkBodyAs(const msg::Envelope& envelope, Fold& fold) {
  const Body* body = envelope.body_as<Body>();
  WSYNC_FUZZ_CHECK(body != nullptr);
  walk(*body, fold);
}

void walkBody(const msg::Envelope& envelope, Fold& fold) {
  switch (envelope.body_type()) {
    case msg::Body::NONE:
      wsync::fuzz::failInvariant(__FILE__, __LINE__, "verifyMessage accepts no message without a body");
    case msg::Body::AgentHello:
      walkBodyAs<msg::AgentHello>(envelope, fold);
      return;
    case msg::Body::Welcome:
      walkBodyAs<msg::Welcome>(envelope, fold);
      return;
    case msg::Body::Heartbeat:
      walkBodyAs<msg::Heartbeat>(envelope, fold);
      return;
    case msg::Body::BeginUpdate:
      walkBodyAs<msg::BeginUpdate>(envelope, fold);
      return;
    case msg::Body::Manifest:
      walkBodyAs<msg::Manifest>(envelope, fold);
      return;
    case msg::Body::Pause:
      walkBodyAs<msg::Pause>(envelope, fold);
      return;
    case msg::Body::PauseAck:
      walkBodyAs<msg::PauseAck>(envelope, fold);
      return;
    case msg::Body::TransferPlan:
      walkBodyAs<msg::TransferPlan>(envelope, fold);
      return;
    case msg::Body::UpdateDone:
      walkBodyAs<msg::UpdateDone>(envelope, fold);
      return;
    case msg::Body::Commit:
      walkBodyAs<msg::Commit>(envelope, fold);
      return;
    case msg::Body::Abort:
      walkBodyAs<msg::Abort>(envelope, fold);
      return;
    case msg::Body::Resume:
      walkBodyAs<msg::Resume>(envelope, fold);
      return;
    case msg::Body::SnapshotRequest:
      walkBodyAs<msg::SnapshotRequest>(envelope, fold);
      return;
    case msg::Body::SnapshotReply:
      walkBodyAs<msg::SnapshotReply>(envelope, fold);
      return;
    case msg::Body::Error:
      walkBodyAs<msg::Error>(envelope, fold);
      return;
    case msg::Body::AgentEvent:
      walkBodyAs<msg::AgentEvent>(envelope, fold);
      return;
    case msg::Body::RoundTransition:
      walkBodyAs<msg::RoundTransition>(envelope, fold);
      return;
    case msg::Body::Goodbye:
      walkBodyAs<msg::Goodbye>(envelope, fold);
      return;
    case msg::Body::CoordinatorBeat:
      walkBodyAs<msg::CoordinatorBeat>(envelope, fold);
      return;
    case msg::Body::ControlRequest:
      walkBodyAs<msg::ControlRequest>(envelope, fold);
      return;
    case msg::Body::ControlReply:
      walkBodyAs<msg::ControlReply>(envelope, fold);
      return;
    case msg::Body::VersionQuery:
      walkBodyAs<msg::VersionQuery>(envelope, fold);
      return;
    case msg::Body::VersionReport:
      walkBodyAs<msg::VersionReport>(envelope, fold);
      return;
    case msg::Body::OperatorPause:
      walkBodyAs<msg::OperatorPause>(envelope, fold);
      return;
    case msg::Body::OperatorResume:
      walkBodyAs<msg::OperatorResume>(envelope, fold);
      return;
    case msg::Body::SlotReport:
      walkBodyAs<msg::SlotReport>(envelope, fold);
      return;
    case msg::Body::Holdings:
      walkBodyAs<msg::Holdings>(envelope, fold);
      return;
    case msg::Body::Bindings:
      walkBodyAs<msg::Bindings>(envelope, fold);
      return;
  }
  // A member added by a newer protocol: the Verifier does not look inside it, so neither may we.
}

// The fold of every field, and how many enum fields hold a value their enum does not declare.
Fold walkEnvelope(const msg::Envelope& envelope) {
  Fold fold;
  fold.add(envelope.protocol_version());
  fold.add(envelope.epoch());
  fold.add(envelope.seq());
  fold.add(envelope.sent_at_ns());
  fold.add(envelope.body_type(), wsync::bus::bodyName(envelope.body_type()));
  walkBody(envelope, fold);
  return fold;
}

// The fold of a message that decoded: every enum field holds a declared value.
std::uint64_t walk(const msg::Envelope& envelope) {
  const Fold fold = walkEnvelope(envelope);
  WSYNC_FUZZ_CHECK(fold.undeclaredEnums() == 0);
  return fold.value();
}

// A member of the union as this build knows it; a larger tag comes from a newer protocol.
bool isKnownBody(msg::Body type) { return type > msg::Body::NONE && type <= msg::Body::MAX; }

// How many of the typed accessors answer; exactly one must for a known body type, none for an unknown one.
template <typename... Bodies>
int typedBodiesOf(const Message& message) {
  return ((message.as<Bodies>() != nullptr ? 1 : 0) + ...);
}

int typedBodiesOf(const Message& message) {
  return typedBodiesOf<msg::AgentHello, msg::Welcome, msg::Heartbeat, msg::BeginUpdate, msg::Manifest, msg::Pause,
                       msg::PauseAck, msg::TransferPlan, msg::UpdateDone, msg::Commit, msg::Abort, msg::Resume,
                       msg::SnapshotRequest, msg::SnapshotReply, msg::Error, msg::AgentEvent, msg::RoundTransition,
                       msg::Goodbye, msg::CoordinatorBeat, msg::ControlRequest, msg::ControlReply, msg::VersionQuery,
                       msg::VersionReport, msg::OperatorPause, msg::OperatorResume, msg::SlotReport>(message);
}

void checkRejected(MessageError error, std::span<const std::uint8_t> bytes) {
  WSYNC_FUZZ_CHECK(!wsync::bus::toString(error).empty());
  WSYNC_FUZZ_CHECK((error == MessageError::Empty) == bytes.empty());
  WSYNC_FUZZ_CHECK(error != MessageError::BadFraming);  // a framing error, never a decoding one
  if (error == MessageError::TooLarge) WSYNC_FUZZ_CHECK(bytes.size() > wsync::bus::kMaxMessageBytes);
}

// Checks a decoded message against the envelope verifyMessage returned for the same bytes, and returns the fold
// of its walk.
std::uint64_t checkDecoded(const Message& message, const msg::Envelope& verified, std::span<const std::uint8_t> bytes) {
  WSYNC_FUZZ_CHECK(message.bytes().size() == bytes.size());
  WSYNC_FUZZ_CHECK(std::memcmp(message.bytes().data(), bytes.data(), bytes.size()) == 0);
  WSYNC_FUZZ_CHECK(message.type() == verified.body_type());
  WSYNC_FUZZ_CHECK(message.seq() == verified.seq());
  WSYNC_FUZZ_CHECK(message.epoch() == verified.epoch());
  WSYNC_FUZZ_CHECK(typedBodiesOf(message) == (isKnownBody(message.type()) ? 1 : 0));
  return walk(message.envelope());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A copy of exactly `size` bytes: operator new aligns it for every scalar, and ASan flags a read one byte past
  // its end.
  const std::vector<std::uint8_t> aligned(data, data + size);
  const std::span<const std::uint8_t> bytes(aligned.data(), aligned.size());
  // A zero-copy frame one byte off alignment, as a frame handed over without a copy can be: decode must realign it.
  std::vector<std::uint8_t> shiftedStorage(size + 1);
  if (size > 0) std::memcpy(shiftedStorage.data() + 1, data, size);
  zmq::message_t misalignedFrame(shiftedStorage.data() + 1, size, nullptr);

  const auto envelopeResult = wsync::bus::verifyMessage(bytes);
  auto messageResult = Message::decode(bytes);
  std::string rejectionDetail;
  auto misalignedResult = Message::decode(std::move(misalignedFrame), rejectionDetail);

  // An enum out of range, and only that, is described (naming the field), the same way by both entry points.
  const std::string enumViolation = wsync::bus::describeEnumViolation(bytes);
  const bool enumOutOfRange = !envelopeResult && envelopeResult.error() == MessageError::EnumOutOfRange;
  WSYNC_FUZZ_CHECK(enumViolation.empty() != enumOutOfRange);
  WSYNC_FUZZ_CHECK(rejectionDetail == enumViolation);

  // The three answers agree: a message that verifies decodes, wherever its bytes lie; one that does not is
  // refused for the same reason.
  WSYNC_FUZZ_CHECK(messageResult.has_value() == envelopeResult.has_value());
  WSYNC_FUZZ_CHECK(misalignedResult.has_value() == envelopeResult.has_value());
  if (!envelopeResult) {
    WSYNC_FUZZ_CHECK(messageResult.error() == envelopeResult.error());
    WSYNC_FUZZ_CHECK(misalignedResult.error() == envelopeResult.error());
    checkRejected(envelopeResult.error(), bytes);
    // Refused for an enum, the message is otherwise sound (it passed the Verifier): the hand-written walk may read it
    // and must find the undeclared value too.
    if (enumOutOfRange) WSYNC_FUZZ_CHECK(walkEnvelope(*msg::GetEnvelope(bytes.data())).undeclaredEnums() > 0);
    return 0;
  }

  const msg::Envelope& envelope = **envelopeResult;
  WSYNC_FUZZ_CHECK(&envelope == msg::GetEnvelope(bytes.data()));
  WSYNC_FUZZ_CHECK(envelope.protocol_version() == wsync::bus::kProtocolVersion);
  WSYNC_FUZZ_CHECK(envelope.body_type() != msg::Body::NONE && envelope.body() != nullptr);
  const char* name = wsync::bus::bodyName(envelope.body_type());
  WSYNC_FUZZ_CHECK(
      std::strcmp(name, isKnownBody(envelope.body_type()) ? msg::EnumNameBody(envelope.body_type()) : "Unknown") == 0);

  // The same fields, read from the caller's bytes, from each Message's own copy, and after a move (ZeroMQ keeps
  // small messages inside the message object, so their bytes move with it).
  const std::uint64_t walked = walk(envelope);
  WSYNC_FUZZ_CHECK(checkDecoded(*messageResult, envelope, bytes) == walked);
  WSYNC_FUZZ_CHECK(checkDecoded(*misalignedResult, envelope, bytes) == walked);
  const Message moved = std::move(*messageResult);
  WSYNC_FUZZ_CHECK(checkDecoded(moved, envelope, bytes) == walked);
  return 0;
}
