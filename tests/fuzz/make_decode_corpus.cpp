// Writes the seed corpus of the decode fuzzer: one realistic message per member of Body, and edge cases the
// decoder must pass or refuse (empty tables, the deepest nesting, another protocol version, a foreign file
// identifier, missing required fields, a misaligned vector, truncation). Each seed is checked against the answer
// the decoder owes it, and the exit status is 1 if one gets another. The output is deterministic, so regenerating
// the committed seeds after a schema change shows only real differences:
//   wsync_make_decode_corpus tests/fuzz/corpus/decode
// Not run by the tests; ctest replays what it wrote (fuzz_decode_corpus).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <wsync/schemas/control_generated.h>

#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/protocol.hpp"

namespace {

namespace fs = std::filesystem;
namespace msg = wsync::msg;
using Bytes = std::vector<std::uint8_t>;
using wsync::bus::MessageError;

// Fixed stamps instead of the clock that MessageBuilder reads, so that every run writes the same bytes.
constexpr std::uint64_t kSentAtNs = 1'732'000'000'123'456'789ULL;
constexpr std::uint64_t kEpoch = 1'732'000'000'000'000'000ULL;

// NCCL_UNIQUE_ID_BYTES: the size of the id a TransferPlan carries for the nccl channel.
constexpr std::size_t kNcclUniqueIdBytes = 128;

struct EnvelopeFields {
  std::uint16_t protocolVersion = wsync::bus::kProtocolVersion;
  std::uint64_t seq = 1;
  const char* fileIdentifier = msg::EnvelopeIdentifier();
};

// Lays the envelope out as MessageBuilder::finishUnion does; a null body leaves the field out.
Bytes finishUnion(flatbuffers::FlatBufferBuilder& fbb, msg::Body type, flatbuffers::Offset<void> body,
                  const EnvelopeFields& fields = {}) {
  msg::EnvelopeBuilder envelope(fbb);
  envelope.add_protocol_version(fields.protocolVersion);
  envelope.add_epoch(kEpoch);
  envelope.add_seq(fields.seq);
  envelope.add_sent_at_ns(kSentAtNs);
  envelope.add_body_type(type);
  if (!body.IsNull()) envelope.add_body(body);
  fbb.Finish(envelope.Finish(), fields.fileIdentifier);
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

template <typename Body>
Bytes finish(flatbuffers::FlatBufferBuilder& fbb, flatbuffers::Offset<Body> body, const EnvelopeFields& fields = {}) {
  return finishUnion(fbb, msg::BodyTraits<Body>::enum_value, body.Union(), fields);
}

// --- realistic contents ------------------------------------------------------------------------------------

const msg::Digest128 kManifestDigest(0x9e37'79b9'7f4a'7c15ULL, 0xc2b2'ae3d'27d4'eb4fULL);
const msg::Digest128 kPayloadDigest(0x1656'67b1'9e37'79f9ULL, 0x85eb'ca77'c2b2'ae63ULL);
// A registration secret as a Welcome hands it out (16 bytes of getrandom).
const std::vector<std::uint8_t> kRegistrationSecret{0x9e, 0x37, 0x79, 0xb9, 0x7f, 0x4a, 0x7c, 0x15,
                                                    0xf3, 0x9c, 0xc0, 0x60, 0x5c, 0xed, 0xc8, 0x34};

struct TensorSpec {
  std::string name;
  msg::DType dtype;
  std::vector<std::int64_t> shape;
  bool hasShapeField = true;  // false: the field is left out, rather than written as an empty vector
};

std::uint64_t elementBytes(msg::DType dtype) {
  switch (dtype) {
    case msg::DType::F64:
    case msg::DType::I64:
    case msg::DType::U64:
      return 8;
    case msg::DType::F32:
    case msg::DType::I32:
    case msg::DType::U32:
      return 4;
    case msg::DType::F16:
    case msg::DType::BF16:
    case msg::DType::I16:
    case msg::DType::U16:
      return 2;
    default:
      return 1;
  }
}

// A decoder-only transformer in the safetensors naming of Hugging Face checkpoints, `layers` layers deep.
std::vector<TensorSpec> transformerTensors(int layers) {
  constexpr std::int64_t kHidden = 4096;
  constexpr std::int64_t kKeyValue = 1024;
  constexpr std::int64_t kIntermediate = 14336;
  constexpr std::int64_t kVocabulary = 32000;
  std::vector<TensorSpec> tensors{{"model.embed_tokens.weight", msg::DType::BF16, {kVocabulary, kHidden}}};
  for (int layer = 0; layer < layers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    tensors.push_back({prefix + "self_attn.q_proj.weight", msg::DType::BF16, {kHidden, kHidden}});
    tensors.push_back({prefix + "self_attn.k_proj.weight", msg::DType::BF16, {kKeyValue, kHidden}});
    tensors.push_back({prefix + "self_attn.v_proj.weight", msg::DType::BF16, {kKeyValue, kHidden}});
    tensors.push_back({prefix + "self_attn.o_proj.weight", msg::DType::BF16, {kHidden, kHidden}});
    tensors.push_back({prefix + "mlp.gate_proj.weight", msg::DType::BF16, {kIntermediate, kHidden}});
    tensors.push_back({prefix + "mlp.up_proj.weight", msg::DType::BF16, {kIntermediate, kHidden}});
    tensors.push_back({prefix + "mlp.down_proj.weight", msg::DType::BF16, {kHidden, kIntermediate}});
    tensors.push_back({prefix + "input_layernorm.weight", msg::DType::F32, {kHidden}});
    tensors.push_back({prefix + "post_attention_layernorm.weight", msg::DType::F32, {kHidden}});
  }
  tensors.push_back({"model.norm.weight", msg::DType::F32, {kHidden}});
  tensors.push_back({"lm_head.weight", msg::DType::BF16, {kVocabulary, kHidden}});
  return tensors;
}

// Extras: a scalar (empty shape), a tensor without a shape field, a quantised one.
std::vector<TensorSpec> withOddTensors(std::vector<TensorSpec> tensors) {
  tensors.push_back({"model.rotary_emb.scaling", msg::DType::F32, {}});
  tensors.push_back({"model.step", msg::DType::I64, {}, false});
  tensors.push_back({"model.layers.0.mlp.down_proj.weight_scale", msg::DType::F8E4M3, {1, 1, 1, 1}});
  return tensors;
}

std::uint64_t manifestBytes(const std::vector<TensorSpec>& specs) {
  std::uint64_t totalBytes = 0;
  for (const TensorSpec& spec : specs) {
    std::uint64_t elements = 1;
    for (const std::int64_t extent : spec.shape) elements *= static_cast<std::uint64_t>(extent);
    totalBytes += elements * elementBytes(spec.dtype);
  }
  return totalBytes;
}

flatbuffers::Offset<msg::Manifest> buildManifest(flatbuffers::FlatBufferBuilder& fbb,
                                                 const std::vector<TensorSpec>& specs) {
  std::vector<flatbuffers::Offset<msg::TensorInfo>> tensors;
  for (const TensorSpec& spec : specs) {
    const auto name = fbb.CreateString(spec.name);
    const auto shape = spec.hasShapeField ? fbb.CreateVector(spec.shape) : 0;
    tensors.push_back(msg::CreateTensorInfo(fbb, name, spec.dtype, shape));
  }
  return msg::CreateManifest(fbb, &kManifestDigest, fbb.CreateVector(tensors), manifestBytes(specs));
}

// --- one message per member of Body ------------------------------------------------------------------------

Bytes agentHelloWorker() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Nccl, msg::ChannelKind::CudaIpc,
                                               msg::ChannelKind::Shm};
  return finish(fbb, msg::CreateAgentHelloDirect(fbb, "worker-3@gpu-node-07", msg::Role::Worker,
                                                 wsync::bus::kProtocolVersion, -1, 8, 41'234, "gpu-node-07", &channels,
                                                 41, "4b0e5f52-41d6-4c1a-9a57-1d1e3c2b9f10/shm:24.1/pid:4.4026531836"));
}

Bytes agentHelloTrainer() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Nccl};
  return finish(fbb, msg::CreateAgentHelloDirect(fbb, "trainer-0", msg::Role::Trainer, wsync::bus::kProtocolVersion, 0,
                                                 4, 1'207, "train-node-01", &channels, 0));
}

// A trainer that sends on tcp: its listener's address, an IPv4 and an IPv6 contact.
Bytes agentHelloTrainerTcp() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Tcp};
  const std::vector<flatbuffers::Offset<msg::ChannelContact>> contacts{
      msg::CreateChannelContactDirect(fbb, msg::ChannelKind::Tcp, "10.0.3.17:41873"),
      msg::CreateChannelContactDirect(fbb, msg::ChannelKind::Tcp, "[fd00::3:17]:41873")};
  return finish(fbb, msg::CreateAgentHelloDirect(
                         fbb, "trainer-0", msg::Role::Trainer, wsync::bus::kProtocolVersion, 0, 1, 1'207, "cpu-node-03",
                         &channels, 0, "8c1d2e3f-41d6-4c1a-9a57-1d1e3c2b9f10/shm:24.3/pid:4.4026531836", &contacts));
}

// A worker registering again on a new connection: its last Welcome's secret proves it the holder.
Bytes agentHelloWithSecret() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Shm};
  return finish(fbb, msg::CreateAgentHelloDirect(fbb, "worker-3@gpu-node-07", msg::Role::Worker,
                                                 wsync::bus::kProtocolVersion, -1, 1, 41'234, "gpu-node-07", &channels,
                                                 41, "4b0e5f52-41d6-4c1a-9a57-1d1e3c2b9f10/shm:24.1/pid:4.4026531836",
                                                 nullptr, &kRegistrationSecret));
}

// An id over kMaxAgentIdBytes: the decoder passes it; refusing it is the coordinator's business.
Bytes agentHelloLongAgentId() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::string agentId(wsync::bus::kMaxAgentIdBytes + 1, 'w');
  return finish(fbb,
                msg::CreateAgentHelloDirect(fbb, agentId.c_str(), msg::Role::Monitor, wsync::bus::kProtocolVersion));
}

Bytes welcome() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb,
                msg::CreateWelcomeDirect(fbb, "worker-3@gpu-node-07", 5, 3, 9, kEpoch, 41, 100, 1'500,
                                         "/wsync-control-1732000000"),
                {.seq = 17});
}

// A worker that reconnects after a commit, while an operator's pause holds.
Bytes welcomeAfterCommit() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(
      fbb,
      msg::CreateWelcomeDirect(fbb, "worker-3@gpu-node-07", 5, 3, 9, kEpoch, 42, 100, 1'500,
                               "/wsync-control-1732000000", 7, &kPayloadDigest, 30'000, 120'000, 2'000, true,
                               msg::PauseMode::Wait, "4b0e5f52-41d6-4c1a-9a57-1d1e3c2b9f10/shm:24.1/pid:4.4026531836",
                               "train-node-01", &kRegistrationSecret),
      {.seq = 18});
}

Bytes heartbeat() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateHeartbeat(fbb, 42), {.seq = 1'024});
}

// Every field at its default: the body is an empty table.
Bytes heartbeatEmptyTable() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateHeartbeat(fbb));
}

// The deepest nesting the schema allows: Envelope > BeginUpdate > Manifest > TensorInfo > shape.
Bytes beginUpdateWithManifest() {
  flatbuffers::FlatBufferBuilder fbb;
  const auto specs = withOddTensors(transformerTensors(1));
  const auto manifest = buildManifest(fbb, specs);
  return finish(fbb, msg::CreateBeginUpdateDirect(fbb, 42, "step-42000", &kManifestDigest, manifest,
                                                  msg::ChannelKind::Nccl, msg::PauseMode::Keep, manifestBytes(specs)));
}

Bytes beginUpdateKnownManifest() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateBeginUpdateDirect(fbb, 43, "step-43000", &kManifestDigest, 0, msg::ChannelKind::Shm,
                                                  msg::PauseMode::Wait, 14'483'456'000));
}

Bytes manifest() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, buildManifest(fbb, transformerTensors(2)));
}

// Many tables, still under the fuzzer's -max_len of 8192 bytes.
Bytes manifestManyTensors() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, buildManifest(fbb, transformerTensors(7)));
}

Bytes manifestWithoutTensors() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateManifest(fbb, &kManifestDigest));
}

Bytes manifestEmptyTensorList() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<flatbuffers::Offset<msg::TensorInfo>> none;
  return finish(fbb, msg::CreateManifest(fbb, &kManifestDigest, fbb.CreateVector(none), 0));
}

Bytes pause() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreatePause(fbb, 7, 42, msg::PauseMode::Wait, &kManifestDigest), {.seq = 301});
}

// Every field written even where it holds its default: another vtable layout for the same table.
Bytes pauseForcedDefaults() {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.ForceDefaults(true);
  return finish(fbb, msg::CreatePause(fbb, 0, 0, msg::PauseMode::Abort, &kManifestDigest));
}

Bytes pauseAckOk() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreatePauseAckDirect(fbb, 7, true, 41));
}

Bytes pauseAckRefused() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreatePauseAckDirect(fbb, 7, false, 41, msg::AbortReason::ManifestMismatch,
                                               "model.layers.0.self_attn.k_proj.weight: shape [1024, 4096] "
                                               "bound as [4096, 4096]"));
}

// A worker that lacks the round's manifest (evicted from its cache): the coordinator sends it again.
Bytes pauseAckManifestUnknown() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreatePauseAckDirect(fbb, 7, false, 41, msg::AbortReason::ManifestMismatch,
                                               "manifest 0x3b... is not among the 8 this worker holds", true));
}

Bytes transferPlanNccl() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> ncclUniqueId(kNcclUniqueIdBytes);
  for (std::size_t i = 0; i < ncclUniqueId.size(); ++i) ncclUniqueId[i] = static_cast<std::uint8_t>(i * 37 + 11);
  return finish(fbb, msg::CreateTransferPlanDirect(fbb, 7, 42, msg::ChannelKind::Nccl, &kManifestDigest, 14'483'456'000,
                                                   256ULL << 20, 54, 2, 256, nullptr, &ncclUniqueId, 3, 9));
}

Bytes transferPlanShm() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateTransferPlanDirect(fbb, 8, 43, msg::ChannelKind::Shm, &kManifestDigest, 14'483'456'000,
                                                   64ULL << 20, 216, 3, 4'096, "/wsync-arena-1732000000-8", nullptr, -1,
                                                   0, 2, 3));
}

Bytes transferPlanTcp() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> token(16);
  for (std::size_t i = 0; i < token.size(); ++i) token[i] = static_cast<std::uint8_t>(i * 91 + 5);
  return finish(
      fbb, msg::CreateTransferPlanDirect(fbb, 9, 44, msg::ChannelKind::Tcp, &kManifestDigest, 250'000'000, 4ULL << 20,
                                         60, 2, 256, nullptr, &token, -1, 0, 1, 3, "10.0.3.17:41873"));
}

Bytes updateDone() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateUpdateDoneDirect(fbb, 7, 42, true, 14'483'456'000, &kPayloadDigest));
}

Bytes updateDoneDigestMismatch() {
  flatbuffers::FlatBufferBuilder fbb;
  const msg::Digest128 received(0x0123'4567'89ab'cdefULL, 0xfedc'ba98'7654'3210ULL);
  return finish(fbb, msg::CreateUpdateDoneDirect(fbb, 7, 42, false, 14'483'456'000, &received,
                                                 msg::AbortReason::DigestMismatch, "bucket 12 of 54"));
}

Bytes commit() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateCommitDirect(fbb, 7, 42, "step-42000", 14'483'456'000, &kPayloadDigest), {.seq = 305});
}

Bytes agentEvent() {
  flatbuffers::FlatBufferBuilder fbb;
  const auto agent = msg::CreateAgentInfoDirect(fbb, "worker-3@gpu-node-07", msg::Role::Worker, 5, 3, 41, 3'100,
                                                msg::AgentState::Receiving, 42, 1'250'000'000);
  return finish(fbb, msg::CreateAgentEventDirect(fbb, msg::AgentEventKind::Dead, agent, "no heartbeat for 3100 ms"),
                {.seq = 12});
}

Bytes roundTransition() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateRoundTransitionDirect(fbb, 7, 42, msg::RoundPhase::Verify, 3, "", 250'478'592),
                {.seq = 304});
}

Bytes goodbye() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateGoodbyeDirect(fbb, "generation finished"));
}

Bytes coordinatorBeat() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(
      fbb, msg::CreateCoordinatorBeat(fbb, 41, 42, msg::RoundPhase::Transfer, 5, 4, true, msg::PauseMode::Keep, 42),
      {.seq = 1'234});
}

// An agent on another host reporting its slot mid-transfer.
Bytes slotReport() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb,
                msg::CreateSlotReportDirect(fbb, "worker-3@gpu-node-07", 5, 41, msg::AgentState::Receiving, 42,
                                            1'073'741'824, &kRegistrationSecret),
                {.seq = 309});
}

Bytes controlEvict() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateControlRequestDirect(fbb, msg::ControlAction::Evict, msg::PauseMode::Keep,
                                                     "worker-3@gpu-node-07", "stuck in a CUDA kernel"));
}

Bytes controlPause() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateControlRequestDirect(fbb, msg::ControlAction::Pause, msg::PauseMode::Wait, nullptr,
                                                     "maintenance"));
}

Bytes controlReply() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateControlReplyDirect(fbb, msg::ControlAction::AbortRound, "round 7 aborted"));
}

Bytes versionQuery() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateVersionQuery(fbb, 42));
}

Bytes versionReport() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateVersionReportDirect(fbb, 42, msg::VersionFate::Aborted, 7, msg::AbortReason::AgentDied,
                                                    "no heartbeat for 1500 ms during Transfer", 41));
}

Bytes operatorPause() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateOperatorPause(fbb, msg::PauseMode::Keep), {.seq = 307});
}

Bytes operatorResume() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateOperatorResume(fbb), {.seq = 308});
}

Bytes abortRound() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateAbortDirect(fbb, 7, 42, msg::AbortReason::AgentDied,
                                            "no heartbeat for 1500 ms during Transfer", "worker-3@gpu-node-07"));
}

Bytes resume() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateResume(fbb, 7, 42), {.seq = 306});
}

Bytes snapshotRequest() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateSnapshotRequest(fbb));
}

Bytes snapshotReply() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<msg::AgentInfo>> agents{
      msg::CreateAgentInfoDirect(fbb, "trainer-0", msg::Role::Trainer, 0, 0, 42, 12),
      msg::CreateAgentInfoDirect(fbb, "worker-0@gpu-node-05", msg::Role::Worker, 1, 1, 42, 40, msg::AgentState::Paused,
                                 42, 250'000'000),
      msg::CreateAgentInfoDirect(fbb, "worker-3@gpu-node-07", msg::Role::Worker, 5, 3, 41, 1'350),
      msg::CreateAgentInfoDirect(fbb, "monitor", msg::Role::Monitor, 6, -1, 0, 95)};
  std::vector<flatbuffers::Offset<msg::TopicSequence>> sequences{msg::CreateTopicSequenceDirect(fbb, "round/", 305),
                                                                 msg::CreateTopicSequenceDirect(fbb, "agent/", 9),
                                                                 msg::CreateTopicSequenceDirect(fbb, "bus/", 1)};
  return finish(
      fbb, msg::CreateSnapshotReplyDirect(fbb, &sequences, kEpoch, 41, "step-41000", msg::RoundPhase::Transfer, 7, 42,
                                          msg::PauseMode::Keep, true, &kManifestDigest, &agents, 250'478'592));
}

Bytes errorReply() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateErrorDirect(fbb, msg::ErrorCode::VersionNotIncreasing,
                                            "version 42 is not above the committed 42", 77));
}

// Bytes after a NUL and outside ASCII: strings are lengths, not C strings.
Bytes errorReplyOddDetail() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::string detail("h\xc3\xb4te\0unknown \xff\xfe", 16);
  return finish(fbb, msg::CreateError(fbb, msg::ErrorCode::Internal, fbb.CreateString(detail), 0));
}

// --- envelopes the decoder must refuse, or pass for forward compatibility ----------------------------------

Bytes protocolVersion(std::uint16_t version) {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateHeartbeat(fbb, 42), {.protocolVersion = version});
}

Bytes foreignFileIdentifier() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateHeartbeat(fbb, 42), {.fileIdentifier = "WSYX"});
}

// The envelope laid out by the generated CreateEnvelope(), which orders fields by size rather than as
// MessageBuilder adds them.
Bytes heartbeatGeneratedLayout(bool sizePrefixed) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto body = msg::CreateHeartbeat(fbb, 42);
  const auto envelope =
      msg::CreateEnvelope(fbb, wsync::bus::kProtocolVersion, kEpoch, 1, kSentAtNs, msg::Body::Heartbeat, body.Union());
  // Size-prefixed, the identifier sits four bytes later than a reader of plain buffers looks for it.
  if (sizePrefixed) {
    msg::FinishSizePrefixedEnvelopeBuffer(fbb, envelope);
  } else {
    msg::FinishEnvelopeBuffer(fbb, envelope);
  }
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

Bytes withoutBody() {
  flatbuffers::FlatBufferBuilder fbb;
  return finishUnion(fbb, msg::Body::NONE, 0);
}

Bytes bodyTypeWithoutBody() {
  flatbuffers::FlatBufferBuilder fbb;
  return finishUnion(fbb, msg::Body::Pause, 0);
}

Bytes bodyWithoutBodyType() {
  flatbuffers::FlatBufferBuilder fbb;
  return finishUnion(fbb, msg::Body::NONE, msg::CreateHeartbeat(fbb, 42).Union());
}

// A member a newer protocol appended to the union: it verifies (the Verifier cannot look inside it).
Bytes unknownBodyType() {
  flatbuffers::FlatBufferBuilder fbb;
  const auto body = msg::CreateCommitDirect(fbb, 7, 42, "from the future", 1);
  return finishUnion(fbb, static_cast<msg::Body>(static_cast<std::uint8_t>(msg::Body::MAX) + 1), body.Union());
}

// Required fields left out, by tagging an empty table as a type that requires one.
Bytes agentHelloWithoutAgentId() {
  flatbuffers::FlatBufferBuilder fbb;
  return finishUnion(fbb, msg::Body::AgentHello, msg::CreateSnapshotRequest(fbb).Union());
}

Bytes tensorWithoutName() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<flatbuffers::Offset<msg::TensorInfo>> tensors{
      flatbuffers::Offset<msg::TensorInfo>(msg::CreateSnapshotRequest(fbb).o)};
  return finish(fbb, msg::CreateManifest(fbb, &kManifestDigest, fbb.CreateVector(tensors), 0));
}

// The Verifier checks that a vector's length field is 4-aligned, not that 8-byte elements are 8-aligned
// (google/flatbuffers#8397), so a TensorInfo.shape laid 4 bytes off passes it, and every read of the shape is then
// a misaligned load. The decoder must refuse it. The builder always aligns a vector of long, so the shape is written
// as twice as many uints under the length of the longs.
Bytes manifestMisalignedShape() {
  const std::vector<std::int64_t> shape{4096, 14336};
  for (const bool pad : {false, true}) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto name = fbb.CreateString("model.layers.0.mlp.down_proj.weight");
    if (pad) fbb.PushElement<std::uint32_t>(0);
    fbb.StartVector(2 * shape.size(), sizeof(std::uint32_t));
    for (auto extent = shape.rbegin(); extent != shape.rend(); ++extent) {  // the builder writes back to front
      const auto bits = static_cast<std::uint64_t>(*extent);
      fbb.PushElement(static_cast<std::uint32_t>(bits >> 32));
      fbb.PushElement(static_cast<std::uint32_t>(bits));
    }
    const flatbuffers::Offset<flatbuffers::Vector<std::int64_t>> misaligned(fbb.EndVector(shape.size()));
    // Offsets count from the end of a buffer whose size is a multiple of 8: the elements, 4 bytes past the length
    // field, are off alignment when the length field is on it.
    if (misaligned.o % alignof(std::int64_t) != 0) continue;
    const std::vector<flatbuffers::Offset<msg::TensorInfo>> tensors{
        msg::CreateTensorInfo(fbb, name, msg::DType::BF16, misaligned)};
    return finish(fbb, msg::CreateManifest(fbb, &kManifestDigest, fbb.CreateVector(tensors), 4096 * 14336 * 2));
  }
  return {};  // unreachable: one of the two layouts is off alignment
}

// The Verifier does not check enum ranges; the decoder refuses a value the enum does not declare, wherever it is.
Bytes controlPauseModeOutOfRange() {
  flatbuffers::FlatBufferBuilder fbb;
  return finish(fbb, msg::CreateControlRequestDirect(fbb, msg::ControlAction::Pause, static_cast<msg::PauseMode>(200),
                                                     nullptr, "maintenance"));
}

Bytes agentHelloChannelOutOfRange() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Shm, static_cast<msg::ChannelKind>(9)};
  return finish(
      fbb, msg::CreateAgentHelloDirect(fbb, "worker-0@gpu-node-05", msg::Role::Worker, wsync::bus::kProtocolVersion, -1,
                                       1, 41'234, "gpu-node-05", &channels));
}

Bytes agentHelloContactOutOfRange() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Tcp};
  const std::vector<flatbuffers::Offset<msg::ChannelContact>> contacts{
      msg::CreateChannelContactDirect(fbb, static_cast<msg::ChannelKind>(9), "10.0.3.17:41873")};
  return finish(fbb, msg::CreateAgentHelloDirect(fbb, "trainer-0", msg::Role::Trainer, wsync::bus::kProtocolVersion, 0,
                                                 1, 1'207, "cpu-node-03", &channels, 0, nullptr, &contacts));
}

Bytes manifestDTypeOutOfRange() {
  flatbuffers::FlatBufferBuilder fbb;
  auto specs = transformerTensors(0);
  specs.back().dtype = static_cast<msg::DType>(200);
  return finish(fbb, buildManifest(fbb, specs));
}

Bytes truncated(Bytes bytes) {
  bytes.resize(bytes.size() / 2);
  return bytes;
}

Bytes tooShort() { return {'W', 'S', 'Y', 'N'}; }

struct Seed {
  std::string name;
  Bytes bytes;
  std::optional<MessageError> refusal = std::nullopt;  // what the decoder must answer; none: it decodes
};

std::vector<Seed> seeds() {
  return {
      {"agent_hello_worker", agentHelloWorker()},
      {"agent_hello_trainer", agentHelloTrainer()},
      {"agent_hello_trainer_tcp", agentHelloTrainerTcp()},
      {"agent_hello_with_secret", agentHelloWithSecret()},
      {"agent_hello_long_agent_id", agentHelloLongAgentId()},
      {"welcome", welcome()},
      {"welcome_after_commit", welcomeAfterCommit()},
      {"heartbeat", heartbeat()},
      {"heartbeat_empty_table", heartbeatEmptyTable()},
      {"heartbeat_generated_layout", heartbeatGeneratedLayout(false)},
      {"begin_update_with_manifest", beginUpdateWithManifest()},
      {"begin_update_known_manifest", beginUpdateKnownManifest()},
      {"manifest", manifest()},
      {"manifest_many_tensors", manifestManyTensors()},
      {"manifest_without_tensors", manifestWithoutTensors()},
      {"manifest_empty_tensor_list", manifestEmptyTensorList()},
      {"pause", pause()},
      {"pause_forced_defaults", pauseForcedDefaults()},
      {"pause_ack_ok", pauseAckOk()},
      {"pause_ack_refused", pauseAckRefused()},
      {"pause_ack_manifest_unknown", pauseAckManifestUnknown()},
      {"transfer_plan_nccl", transferPlanNccl()},
      {"transfer_plan_shm", transferPlanShm()},
      {"transfer_plan_tcp", transferPlanTcp()},
      {"update_done", updateDone()},
      {"update_done_digest_mismatch", updateDoneDigestMismatch()},
      {"commit", commit()},
      {"agent_event", agentEvent()},
      {"round_transition", roundTransition()},
      {"goodbye", goodbye()},
      {"coordinator_beat", coordinatorBeat()},
      {"control_evict", controlEvict()},
      {"control_pause", controlPause()},
      {"control_reply", controlReply()},
      {"version_query", versionQuery()},
      {"version_report", versionReport()},
      {"abort", abortRound()},
      {"resume", resume()},
      {"operator_pause", operatorPause()},
      {"operator_resume", operatorResume()},
      {"slot_report", slotReport()},
      {"snapshot_request", snapshotRequest()},
      {"snapshot_reply", snapshotReply()},
      {"error", errorReply()},
      {"error_odd_detail", errorReplyOddDetail()},
      {"refused_protocol_version_0", protocolVersion(0), MessageError::ProtocolMismatch},
      {"refused_protocol_version_previous", protocolVersion(wsync::bus::kProtocolVersion - 1),
       MessageError::ProtocolMismatch},
      {"refused_protocol_version_next", protocolVersion(wsync::bus::kProtocolVersion + 1),
       MessageError::ProtocolMismatch},
      {"refused_foreign_file_identifier", foreignFileIdentifier(), MessageError::NotWsync},
      {"refused_size_prefixed", heartbeatGeneratedLayout(true), MessageError::NotWsync},
      {"refused_without_body", withoutBody(), MessageError::MissingBody},
      {"refused_body_type_without_body", bodyTypeWithoutBody(), MessageError::MissingBody},
      {"refused_body_without_body_type", bodyWithoutBodyType(), MessageError::MissingBody},
      {"refused_agent_hello_without_agent_id", agentHelloWithoutAgentId(), MessageError::Unverifiable},
      {"refused_tensor_without_name", tensorWithoutName(), MessageError::Unverifiable},
      {"refused_misaligned_tensor_shape", manifestMisalignedShape(), MessageError::Unverifiable},
      {"refused_truncated_manifest", truncated(manifest()), MessageError::Unverifiable},
      {"refused_too_short", tooShort(), MessageError::NotWsync},
      {"refused_enum_out_of_range", controlPauseModeOutOfRange(), MessageError::EnumOutOfRange},
      {"refused_enum_out_of_range_in_vector", agentHelloChannelOutOfRange(), MessageError::EnumOutOfRange},
      {"refused_enum_out_of_range_in_contact", agentHelloContactOutOfRange(), MessageError::EnumOutOfRange},
      {"refused_enum_out_of_range_in_manifest", manifestDTypeOutOfRange(), MessageError::EnumOutOfRange},
      {"refused_empty", {}, MessageError::Empty},
      {"unknown_body_type", unknownBodyType()},
  };
}

bool writeFile(const fs::path& path, const Bytes& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(file);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FOLDER\n  writes the seed corpus of the decode fuzzer into FOLDER\n", argv[0]);
    return 2;
  }
  const std::string folder = argv[1];

  std::error_code error;
  fs::create_directories(folder, error);
  if (error) {
    std::fprintf(stderr, "make_decode_corpus: cannot create %s: %s\n", folder.c_str(), error.message().c_str());
    return 1;
  }
  std::size_t totalBytes = 0;
  std::size_t wrongAnswers = 0;
  const auto allSeeds = seeds();
  for (const auto& [name, bytes, refusal] : allSeeds) {
    const fs::path path = fs::path(folder) / (name + "." + msg::EnvelopeExtension());
    if (!writeFile(path, bytes)) {
      std::fprintf(stderr, "make_decode_corpus: cannot write %s\n", path.c_str());
      return 1;
    }
    totalBytes += bytes.size();
    // Each seed is checked against its purpose, so that a refused_* seed is refused for the reason its name says.
    // A wrong answer is a decoder bug: the seed is written all the same, so that the corpus test shows it too.
    const auto envelopeResult = wsync::bus::verifyMessage(bytes);
    const std::optional<MessageError> answer =
        envelopeResult ? std::nullopt : std::optional<MessageError>(envelopeResult.error());
    if (answer != refusal) {
      std::fprintf(stderr, "make_decode_corpus: %s: the decoder answers '%s', expected '%s'\n", name.c_str(),
                   answer ? std::string(wsync::bus::toString(*answer)).c_str() : "decoded",
                   refusal ? std::string(wsync::bus::toString(*refusal)).c_str() : "decoded");
      ++wrongAnswers;
    }
  }
  std::printf("make_decode_corpus: wrote %zu seeds (%zu bytes) to %s\n", allSeeds.size(), totalBytes, folder.c_str());
  return wrongAnswers == 0 ? 0 : 1;
}
