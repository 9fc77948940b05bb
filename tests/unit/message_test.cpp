// Control messages: every body type survives a round trip; corrupted, truncated, oversized, foreign and
// wrong-protocol buffers are rejected with the right MessageError and never read out of bounds (the ASan run
// checks the latter); an enum value its enum does not declare is refused wherever it sits, naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/received.hpp"
#include "wsync/bus/protocol/region.hpp"
#include "wsync/bus/transport/router_endpoint.hpp"

namespace wsync::bus {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes toBytes(std::span<const std::uint8_t> span) { return Bytes(span.begin(), span.end()); }

// A message with strings, vectors and nested tables, so truncation and corruption hit every kind of field.
// `regionCount` held regions of rank 2 ride along as the BeginUpdate's holdings (none: no holdings).
Bytes beginUpdateWithManifest(std::size_t tensorCount = 3, std::size_t regionCount = 0) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  std::vector<flatbuffers::Offset<msg::TensorInfo>> tensors;
  for (std::size_t i = 0; i < tensorCount; ++i) {
    const std::vector<std::int64_t> shape{768, static_cast<std::int64_t>(i + 1)};
    tensors.push_back(msg::CreateTensorInfoDirect(fbb, ("model.layers." + std::to_string(i) + ".weight").c_str(),
                                                  msg::DType::BF16, &shape));
  }
  const msg::Digest128 digest(0x1111, 0x2222);
  auto manifest = msg::CreateManifestDirect(fbb, &digest, &tensors, 4096);
  flatbuffers::Offset<msg::Holdings> holdings;
  if (regionCount > 0) {
    const std::vector<std::int64_t> offset{0, 0};
    const std::vector<std::int64_t> extent{768, 1};
    const auto offsets = fbb.CreateVector(offset);
    const auto extents = fbb.CreateVector(extent);
    std::vector<flatbuffers::Offset<msg::Region>> regions;
    for (std::size_t i = 0; i < regionCount; ++i) {
      regions.push_back(msg::CreateRegion(fbb, static_cast<std::uint32_t>(i % tensorCount), offsets, extents));
    }
    holdings = msg::CreateHoldingsDirect(fbb, &digest, &digest, &regions);
  }
  auto body =
      msg::CreateBeginUpdateDirect(fbb, 7, "step-7", &digest, manifest, msg::ChannelKind::Shm, msg::PauseMode::Keep,
                                   4096, 0, 1, regionCount > 0 ? &digest : nullptr, holdings);
  return toBytes(builder.finish(body, EnvelopeStamp{0xE, 42}));
}

Bytes truncated(Bytes bytes) {
  bytes.resize(bytes.size() / 2);
  return bytes;
}

// An envelope written by hand, to forge fields MessageBuilder always gets right.
Bytes handmadeEnvelope(std::uint16_t protocolVersion, bool withBody, msg::Body bodyType = msg::Body::Resume) {
  flatbuffers::FlatBufferBuilder fbb;
  auto body = msg::CreateResume(fbb, 1, 2);
  msg::EnvelopeBuilder envelope(fbb);
  envelope.add_protocol_version(protocolVersion);
  if (withBody) {
    envelope.add_body_type(bodyType);
    envelope.add_body(body.Union());
  }
  msg::FinishEnvelopeBuffer(fbb, envelope.Finish());
  return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

TEST(Message, EnvelopeCarriesStampAndProtocol) {
  const Bytes bytes = beginUpdateWithManifest();
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message.has_value()) << toString(message.error());
  EXPECT_EQ(message->envelope().protocol_version(), kProtocolVersion);
  EXPECT_EQ(message->epoch(), 0xEU);
  EXPECT_EQ(message->seq(), 42U);
  EXPECT_GT(message->envelope().sent_at_ns(), 0U);
  EXPECT_EQ(message->type(), msg::Body::BeginUpdate);
  EXPECT_STREQ(bodyName(message->type()), "BeginUpdate");
  EXPECT_EQ(message->as<msg::Pause>(), nullptr);
}

TEST(Message, BeginUpdateWithManifestRoundTrips) {
  auto message = Message::decode(beginUpdateWithManifest());
  ASSERT_TRUE(message.has_value());
  const auto* begin = message->as<msg::BeginUpdate>();
  ASSERT_NE(begin, nullptr);
  EXPECT_EQ(begin->version(), 7U);
  EXPECT_EQ(begin->label()->str(), "step-7");
  EXPECT_EQ(begin->pause_mode(), msg::PauseMode::Keep);
  EXPECT_EQ(begin->manifest_digest()->lo(), 0x1111U);
  const auto* tensors = begin->manifest()->tensors();
  ASSERT_EQ(tensors->size(), 3U);
  EXPECT_EQ(tensors->Get(2)->name()->str(), "model.layers.2.weight");
  EXPECT_EQ(tensors->Get(2)->dtype(), msg::DType::BF16);
  EXPECT_EQ(tensors->Get(2)->shape()->Get(1), 3);
}

// One builder per body type, each checked after decoding: the whole vocabulary of a round.
TEST(Message, EveryBodyTypeRoundTrips) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const msg::Digest128 digest(5, 6);
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Shm, msg::ChannelKind::Nccl};
  const std::vector<std::uint8_t> ncclId(128, 0xAB);

  auto check = [&](msg::Body expected, std::span<const std::uint8_t> bytes, auto&& inspect) {
    auto message = Message::decode(bytes);
    ASSERT_TRUE(message.has_value()) << bodyName(expected) << ": " << toString(message.error());
    ASSERT_EQ(message->type(), expected);
    inspect(*message);
    builder.reset();
  };

  check(msg::Body::AgentHello,
        builder.finish(msg::CreateAgentHelloDirect(fbb, "worker-3", msg::Role::Worker, kProtocolVersion, 2, 4, 1234,
                                                   "node-a", &channels, 9)),
        [](const Message& m) {
          const auto* hello = m.as<msg::AgentHello>();
          EXPECT_EQ(hello->agent_id()->str(), "worker-3");
          EXPECT_EQ(hello->role(), msg::Role::Worker);
          EXPECT_EQ(hello->requested_rank(), 2);
          EXPECT_EQ(hello->group_size(), 4U);
          EXPECT_EQ(hello->channels()->Get(1), msg::ChannelKind::Nccl);
          EXPECT_EQ(hello->applied_version(), 9U);
        });
  check(msg::Body::Welcome,
        builder.finish(msg::CreateWelcomeDirect(fbb, "worker-3", 5, 2, 4, 77, 9, 100, 3000, "wsync-0-bus")),
        [](const Message& m) {
          const auto* welcome = m.as<msg::Welcome>();
          EXPECT_EQ(welcome->slot(), 5U);
          EXPECT_EQ(welcome->epoch(), 77U);
          EXPECT_EQ(welcome->heartbeat_timeout_ms(), 3000U);
          EXPECT_EQ(welcome->control_block()->str(), "wsync-0-bus");
        });
  check(msg::Body::Heartbeat, builder.finish(msg::CreateHeartbeat(fbb, 11)),
        [](const Message& m) { EXPECT_EQ(m.as<msg::Heartbeat>()->applied_version(), 11U); });
  check(msg::Body::Manifest, builder.finish(msg::CreateManifest(fbb, &digest, 0, 0)),
        [](const Message& m) { EXPECT_EQ(m.as<msg::Manifest>()->digest()->hi(), 6U); });
  check(msg::Body::Pause, builder.finish(msg::CreatePause(fbb, 3, 8, msg::PauseMode::Wait, &digest)),
        [](const Message& m) {
          EXPECT_EQ(m.as<msg::Pause>()->mode(), msg::PauseMode::Wait);
          EXPECT_EQ(m.as<msg::Pause>()->round(), 3U);
        });
  check(msg::Body::PauseAck,
        builder.finish(msg::CreatePauseAckDirect(fbb, 3, false, 7, msg::AbortReason::ManifestMismatch,
                                                 "tensor 'lm_head.weight': shape [10] != [12]")),
        [](const Message& m) {
          const auto* ack = m.as<msg::PauseAck>();
          EXPECT_FALSE(ack->ok());
          EXPECT_EQ(ack->reason(), msg::AbortReason::ManifestMismatch);
          EXPECT_NE(ack->detail()->str().find("lm_head.weight"), std::string::npos);
        });
  check(msg::Body::TransferPlan,
        builder.finish(msg::CreateTransferPlanDirect(fbb, 3, 8, msg::ChannelKind::Nccl, &digest, 1 << 20, 1 << 18, 4, 2,
                                                     256, "arena", &ncclId, 2, 4)),
        [](const Message& m) {
          const auto* plan = m.as<msg::TransferPlan>();
          EXPECT_EQ(plan->bucket_count(), 4U);
          EXPECT_EQ(plan->buffer_count(), 2U);
          EXPECT_EQ(plan->nccl_unique_id()->size(), 128U);
          EXPECT_EQ(plan->nccl_rank(), 2);
        });
  check(msg::Body::UpdateDone,
        builder.finish(msg::CreateUpdateDoneDirect(fbb, 3, 8, true, 1 << 20, &digest, msg::AbortReason::None, "")),
        [](const Message& m) {
          EXPECT_EQ(m.as<msg::UpdateDone>()->bytes(), 1U << 20);
          EXPECT_EQ(m.as<msg::UpdateDone>()->digest()->lo(), 5U);
        });
  check(msg::Body::Commit, builder.finish(msg::CreateCommitDirect(fbb, 3, 8, "step-8", 1 << 20)),
        [](const Message& m) { EXPECT_EQ(m.as<msg::Commit>()->label()->str(), "step-8"); });
  check(msg::Body::Abort,
        builder.finish(msg::CreateAbortDirect(fbb, 3, 8, msg::AbortReason::AgentDied, "no heartbeat", "worker-2")),
        [](const Message& m) {
          EXPECT_EQ(m.as<msg::Abort>()->reason(), msg::AbortReason::AgentDied);
          EXPECT_EQ(m.as<msg::Abort>()->agent_id()->str(), "worker-2");
        });
  check(msg::Body::Resume, builder.finish(msg::CreateResume(fbb, 3, 8)),
        [](const Message& m) { EXPECT_EQ(m.as<msg::Resume>()->version(), 8U); });
  check(msg::Body::SnapshotRequest, builder.finish(msg::CreateSnapshotRequest(fbb)),
        [](const Message& m) { EXPECT_NE(m.as<msg::SnapshotRequest>(), nullptr); });
  {
    std::vector<flatbuffers::Offset<msg::AgentInfo>> agents{
        msg::CreateAgentInfoDirect(fbb, "trainer-0", msg::Role::Trainer, 0, 0, 8, 12)};
    std::vector<flatbuffers::Offset<msg::TopicSequence>> sequences{msg::CreateTopicSequenceDirect(fbb, "round/", 99),
                                                                   msg::CreateTopicSequenceDirect(fbb, "agent/", 4)};
    check(msg::Body::SnapshotReply,
          builder.finish(msg::CreateSnapshotReplyDirect(fbb, &sequences, 77, 8, "step-8", msg::RoundPhase::Transfer, 4,
                                                        9, msg::PauseMode::Keep, true, &digest, &agents)),
          [](const Message& m) {
            const auto* reply = m.as<msg::SnapshotReply>();
            EXPECT_EQ(reply->event_sequences()->Get(0)->family()->str(), "round/");
            EXPECT_EQ(reply->event_sequences()->Get(0)->seq(), 99U);
            EXPECT_EQ(reply->event_sequences()->Get(1)->seq(), 4U);
            EXPECT_EQ(reply->phase(), msg::RoundPhase::Transfer);
            EXPECT_TRUE(reply->paused());
            EXPECT_EQ(reply->agents()->Get(0)->agent_id()->str(), "trainer-0");
          });
  }
  check(msg::Body::Error, builder.finish(msg::CreateErrorDirect(fbb, msg::ErrorCode::DuplicateAgent, "taken", 4)),
        [](const Message& m) {
          EXPECT_EQ(m.as<msg::Error>()->code(), msg::ErrorCode::DuplicateAgent);
          EXPECT_EQ(m.as<msg::Error>()->in_reply_to(), 4U);
        });
  check(msg::Body::OperatorPause, builder.finish(msg::CreateOperatorPause(fbb, msg::PauseMode::Wait)),
        [](const Message& m) {
          EXPECT_EQ(m.as<msg::OperatorPause>()->mode(), msg::PauseMode::Wait);
          EXPECT_STREQ(bodyName(m.type()), "OperatorPause");
        });
  check(msg::Body::OperatorResume, builder.finish(msg::CreateOperatorResume(fbb)), [](const Message& m) {
    EXPECT_NE(m.as<msg::OperatorResume>(), nullptr);
    EXPECT_STREQ(bodyName(m.type()), "OperatorResume");
  });
}

TEST(Message, RejectsEmpty) {
  EXPECT_EQ(Message::decode(Bytes{}).error(), MessageError::Empty);
  EXPECT_EQ(verifyMessage({}).error(), MessageError::Empty);
}

TEST(Message, RejectsOversizedBeforeReadingIt) {
  Bytes huge(kMaxMessageBytes + 1, 0);
  const Bytes valid = beginUpdateWithManifest();
  std::memcpy(huge.data(), valid.data(), valid.size());  // a valid prefix must not matter
  EXPECT_EQ(Message::decode(huge).error(), MessageError::TooLarge);
}

TEST(Message, RejectsForeignBytes) {
  const std::string text = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
  EXPECT_EQ(Message::decode(Bytes(text.begin(), text.end())).error(), MessageError::NotWsync);
  EXPECT_EQ(Message::decode(Bytes{1, 2, 3}).error(), MessageError::NotWsync);
}

// A truncated buffer is rejected, unless all it lost was the alignment padding after the last string (FlatBuffers
// writes back to front, so the tail holds the first-written string): then every field must still read the same.
TEST(Message, RejectsEveryTruncationThatLosesData) {
  const Bytes valid = beginUpdateWithManifest();
  const std::string firstName = "model.layers.0.weight";
  for (std::size_t length = 1; length < valid.size(); ++length) {
    auto result = Message::decode(std::span(valid.data(), length));
    if (!result) {
      EXPECT_TRUE(result.error() == MessageError::Unverifiable || result.error() == MessageError::NotWsync)
          << toString(result.error());
      continue;
    }
    const std::size_t lost = valid.size() - length;
    ASSERT_LT(lost, alignof(std::uint64_t)) << "a " << length << "-byte prefix of " << valid.size() << " was accepted";
    ASSERT_TRUE(std::all_of(valid.begin() + static_cast<std::ptrdiff_t>(length), valid.end(), [](std::uint8_t byte) {
      return byte == 0;
    })) << "the accepted prefix dropped non-padding bytes";
    EXPECT_EQ(result->as<msg::BeginUpdate>()->manifest()->tensors()->Get(0)->name()->str(), firstName);
  }
}

TEST(Message, CorruptedIdentifierIsNotWsync) {
  Bytes bytes = beginUpdateWithManifest();
  bytes[4] ^= 0xFF;  // the file identifier sits right after the root offset
  EXPECT_EQ(Message::decode(bytes).error(), MessageError::NotWsync);
}

// Every single-byte corruption and a few thousand random multi-byte ones either fail verification or decode to a
// message whose fields are safe to read. The assertion that matters is ASan's: no read outside the buffer.
TEST(Message, CorruptionNeverReadsOutOfBounds) {
  const Bytes valid = beginUpdateWithManifest(8);
  std::size_t rejected = 0;
  auto touchAll = [](const Message& message) {
    std::size_t sum = 0;
    if (const auto* begin = message.as<msg::BeginUpdate>()) {
      if (begin->label() != nullptr) sum += begin->label()->size();
      if (begin->manifest() != nullptr && begin->manifest()->tensors() != nullptr) {
        for (const auto* tensor : *begin->manifest()->tensors()) {
          sum += tensor->name()->size();
          if (tensor->shape() != nullptr) {
            for (std::int64_t dim : *tensor->shape()) sum += static_cast<std::size_t>(dim);
          }
        }
      }
    }
    return sum;
  };
  for (std::size_t at = 0; at < valid.size(); ++at) {
    for (std::uint8_t flip : {std::uint8_t{0x01}, std::uint8_t{0x80}, std::uint8_t{0xFF}}) {
      Bytes bytes = valid;
      bytes[at] ^= flip;
      auto result = Message::decode(bytes);
      if (result) {
        (void)touchAll(*result);
      } else {
        ++rejected;
      }
    }
  }
  std::mt19937 random(1234);
  for (int trial = 0; trial < 5000; ++trial) {
    Bytes bytes = valid;
    for (int hit = 0; hit < 4; ++hit) bytes[random() % bytes.size()] = static_cast<std::uint8_t>(random());
    auto result = Message::decode(bytes);
    if (result) (void)touchAll(*result);
  }
  // Offsets, lengths and the identifier make up much of the buffer, so many flips must be caught.
  EXPECT_GT(rejected, valid.size() / 2);
}

TEST(Message, RejectsOtherProtocolVersion) {
  EXPECT_EQ(Message::decode(handmadeEnvelope(kProtocolVersion + 1, true)).error(), MessageError::ProtocolMismatch);
  EXPECT_EQ(Message::decode(handmadeEnvelope(0, true)).error(), MessageError::ProtocolMismatch);
  EXPECT_TRUE(Message::decode(handmadeEnvelope(kProtocolVersion, true)).has_value());
}

TEST(Message, RejectsMissingBody) {
  EXPECT_EQ(Message::decode(handmadeEnvelope(kProtocolVersion, false)).error(), MessageError::MissingBody);
}

// Append-only evolution: a body type this build does not know still verifies, and reads as "Unknown".
TEST(Message, AcceptsBodyTypeFromNewerProtocol) {
  const auto future = static_cast<msg::Body>(static_cast<std::uint8_t>(msg::Body::MAX) + 1);
  auto message = Message::decode(handmadeEnvelope(kProtocolVersion, true, future));
  ASSERT_TRUE(message.has_value()) << toString(message.error());
  EXPECT_STREQ(bodyName(message->type()), "Unknown");
  EXPECT_EQ(message->as<msg::Resume>(), nullptr);
}

TEST(Message, RejectsTooManyTables) {
  // One table per tensor and per held region: a manifest and holdings just over the verifier's table budget.
  const Bytes bytes = beginUpdateWithManifest(kMaxTensors, kMaxVerifierTables - kMaxTensors + 1);
  ASSERT_LT(bytes.size(), kMaxMessageBytes);
  EXPECT_EQ(Message::decode(bytes).error(), MessageError::Unverifiable);
}

// The largest manifest with the most regions a rank may hold, in one BeginUpdate: within the verifier's budget and
// the message size.
TEST(Message, AManifestAndHoldingsOfTheMostAllowedDecode) {
  const Bytes bytes = beginUpdateWithManifest(kMaxTensors, kMaxRegionsPerAgent);
  ASSERT_LT(bytes.size(), kMaxMessageBytes);
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message.has_value()) << toString(message.error());
  EXPECT_EQ(message->as<msg::BeginUpdate>()->holdings()->regions()->size(), kMaxRegionsPerAgent);
}

// The most tensors a manifest may have, a table each, and the tables around them: within the verifier's budget. (It
// was not: a trainer declaring such a manifest waited for a round the coordinator could not read.)
TEST(Message, AManifestOfTheMostTensorsAllowedDecodes) {
  const Bytes bytes = beginUpdateWithManifest(kMaxTensors);
  ASSERT_LT(bytes.size(), kMaxMessageBytes);
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message.has_value()) << toString(message.error());
  EXPECT_EQ(message->as<msg::BeginUpdate>()->manifest()->tensors()->size(), kMaxTensors);
}

TEST(Message, LargeManifestWithinLimitsDecodes) {
  // A Qwen3-30B-A3B-sized manifest (18,867 tensors) is well inside the limits.
  const Bytes bytes = beginUpdateWithManifest(18'867);
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message.has_value()) << toString(message.error());
  EXPECT_EQ(message->as<msg::BeginUpdate>()->manifest()->tensors()->size(), 18'867U);
}

TEST(Message, MisalignedInputIsCopiedNotMisread) {
  const Bytes valid = beginUpdateWithManifest();
  Bytes shifted(valid.size() + 1);
  std::memcpy(shifted.data() + 1, valid.data(), valid.size());
  auto message = Message::decode(std::span(shifted.data() + 1, valid.size()));
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->as<msg::BeginUpdate>()->version(), 7U);
}

// ZeroMQ keeps messages of up to 33 bytes inside the message object; moving it must not strand the accessors.
TEST(Message, SurvivesMoveOfASmallFrame) {
  MessageBuilder builder(64);
  const Bytes bytes = toBytes(builder.finish(msg::CreateSnapshotRequest(builder.fbb())));
  auto decoded = Message::decode(zmq::message_t(bytes.data(), bytes.size()));
  ASSERT_TRUE(decoded.has_value());
  Message moved = std::move(*decoded);
  std::vector<Message> elsewhere;
  elsewhere.push_back(std::move(moved));
  EXPECT_EQ(elsewhere.front().type(), msg::Body::SnapshotRequest);
  EXPECT_EQ(elsewhere.front().envelope().protocol_version(), kProtocolVersion);
}

TEST(Message, BuilderIsReusable) {
  MessageBuilder builder;
  for (std::uint64_t round = 1; round <= 3; ++round) {
    builder.reset();
    auto bytes = builder.finish(msg::CreateResume(builder.fbb(), round, round * 10), EnvelopeStamp{1, round});
    auto message = Message::decode(bytes);
    ASSERT_TRUE(message.has_value());
    EXPECT_EQ(message->as<msg::Resume>()->version(), round * 10);
    EXPECT_EQ(message->seq(), round);
  }
}

// --- enum ranges ------------------------------------------------------------------------------------------------

// The refusal an out-of-range enum gets, from both entry points, and the detail that names it.
std::string expectEnumOutOfRange(std::span<const std::uint8_t> bytes) {
  EXPECT_EQ(verifyMessage(bytes).error(), MessageError::EnumOutOfRange);
  std::string detail;
  auto message = Message::decode(zmq::message_t(bytes.data(), bytes.size()), detail);
  EXPECT_FALSE(message.has_value());
  if (!message) {
    EXPECT_EQ(message.error(), MessageError::EnumOutOfRange);
  }
  EXPECT_EQ(detail, describeEnumViolation(bytes));
  return detail;
}

TEST(MessageEnums, RefusesABodyFieldOutOfRange) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const auto pause = builder.finish(
      msg::CreateControlRequestDirect(fbb, msg::ControlAction::Pause, static_cast<msg::PauseMode>(200), nullptr, "x"));
  EXPECT_EQ(expectEnumOutOfRange(pause), "ControlRequest.pause_mode = 200 is not one of Abort, Wait, Keep (0..2)");

  builder.reset();
  const auto operatorPause = builder.finish(msg::CreateOperatorPause(fbb, static_cast<msg::PauseMode>(3)));
  EXPECT_EQ(expectEnumOutOfRange(operatorPause), "OperatorPause.mode = 3 is not one of Abort, Wait, Keep (0..2)");

  builder.reset();
  const auto hello =
      builder.finish(msg::CreateAgentHelloDirect(fbb, "worker-0", static_cast<msg::Role>(77), kProtocolVersion));
  EXPECT_EQ(expectEnumOutOfRange(hello),
            "AgentHello.role = 77 is not one of Unknown, Coordinator, Trainer, Worker, Monitor (0..4)");

  // A 16-bit enum.
  builder.reset();
  const auto error = builder.finish(msg::CreateErrorDirect(fbb, static_cast<msg::ErrorCode>(500), "x", 1));
  EXPECT_EQ(expectEnumOutOfRange(error).rfind("Error.code = 500 is not one of None, Malformed,", 0), 0U);
}

TEST(MessageEnums, RefusesAVectorElementOutOfRange) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Shm, static_cast<msg::ChannelKind>(9)};
  const auto hello = builder.finish(
      msg::CreateAgentHelloDirect(fbb, "worker-0", msg::Role::Worker, kProtocolVersion, -1, 1, 0, "node", &channels));
  EXPECT_EQ(expectEnumOutOfRange(hello), "AgentHello.channels[1] = 9 is not one of Shm, Nccl, CudaIpc, Tcp (0..3)");
}

TEST(MessageEnums, RefusesAChannelContactOfAnUndeclaredKind) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const std::vector<msg::ChannelKind> channels{msg::ChannelKind::Tcp};
  const std::vector<flatbuffers::Offset<msg::ChannelContact>> contacts{
      msg::CreateChannelContactDirect(fbb, msg::ChannelKind::Tcp, "10.0.0.7:4100"),
      msg::CreateChannelContactDirect(fbb, static_cast<msg::ChannelKind>(7), "10.0.0.7:4101")};
  const auto hello = builder.finish(msg::CreateAgentHelloDirect(fbb, "trainer-0", msg::Role::Trainer, kProtocolVersion,
                                                                -1, 1, 0, "node", &channels, 0, nullptr, &contacts));
  EXPECT_EQ(expectEnumOutOfRange(hello),
            "AgentHello.channel_contacts[1].kind = 7 is not one of Shm, Nccl, CudaIpc, Tcp (0..3)");
}

TEST(MessageEnums, RefusesANestedTableFieldOutOfRange) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const std::vector<std::int64_t> shape{4, 4};
  std::vector<flatbuffers::Offset<msg::TensorInfo>> tensors{
      msg::CreateTensorInfoDirect(fbb, "a", msg::DType::F32, &shape),
      msg::CreateTensorInfoDirect(fbb, "b", msg::DType::BF16, &shape),
      msg::CreateTensorInfoDirect(fbb, "c", static_cast<msg::DType>(200), &shape)};
  const msg::Digest128 digest(1, 2);
  const auto manifest = msg::CreateManifestDirect(fbb, &digest, &tensors, 96);
  const auto begin = builder.finish(msg::CreateBeginUpdateDirect(fbb, 7, "step-7", &digest, manifest,
                                                                 msg::ChannelKind::Shm, msg::PauseMode::Keep, 96));
  const std::string detail = expectEnumOutOfRange(begin);
  EXPECT_EQ(detail.rfind("BeginUpdate.manifest.tensors[2].dtype = 200 is not one of Unknown, Bool,", 0), 0U) << detail;
}

TEST(MessageEnums, RefusesAFieldOfATableInAVectorOutOfRange) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  std::vector<flatbuffers::Offset<msg::AgentInfo>> agents{
      msg::CreateAgentInfoDirect(fbb, "trainer-0", msg::Role::Trainer, 0, 0, 8, 12, msg::AgentState::Sending),
      msg::CreateAgentInfoDirect(fbb, "worker-0", msg::Role::Worker, 1, 1, 8, 12, static_cast<msg::AgentState>(99))};
  const auto reply = builder.finish(msg::CreateSnapshotReplyDirect(
      fbb, nullptr, 77, 8, "step-8", msg::RoundPhase::Idle, 0, 0, msg::PauseMode::Wait, false, nullptr, &agents));
  EXPECT_EQ(expectEnumOutOfRange(reply),
            "SnapshotReply.agents[1].state = 99 is not one of Unknown, Idle, Paused, Receiving, Sending, Staged "
            "(0..5)");

  // A table nested alone (AgentEvent.agent) rather than in a vector.
  builder.reset();
  const auto agent = msg::CreateAgentInfoDirect(fbb, "worker-0", static_cast<msg::Role>(5));
  const auto event = builder.finish(msg::CreateAgentEventDirect(fbb, msg::AgentEventKind::Joined, agent, "x"));
  EXPECT_EQ(expectEnumOutOfRange(event).rfind("AgentEvent.agent.role = 5 is not one of", 0), 0U);
}

// Every value each enum declares, in the messages that carry it, still decodes.
TEST(MessageEnums, EveryDeclaredValueDecodes) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  auto decodes = [&](std::span<const std::uint8_t> bytes) {
    auto message = Message::decode(bytes);
    EXPECT_TRUE(message.has_value()) << toString(message.error()) << ": " << describeEnumViolation(bytes);
    builder.reset();
  };
  for (const msg::PauseMode mode : msg::EnumValuesPauseMode()) {
    for (const msg::ControlAction action : msg::EnumValuesControlAction()) {
      decodes(builder.finish(msg::CreateControlRequestDirect(fbb, action, mode, "worker-0", "why")));
    }
    decodes(builder.finish(msg::CreatePause(fbb, 1, 2, mode)));
    decodes(builder.finish(msg::CreateOperatorPause(fbb, mode)));
  }
  for (const msg::Role role : msg::EnumValuesRole()) {
    const std::vector<msg::ChannelKind> channels(std::begin(msg::EnumValuesChannelKind()),
                                                 std::end(msg::EnumValuesChannelKind()));
    decodes(
        builder.finish(msg::CreateAgentHelloDirect(fbb, "agent", role, kProtocolVersion, -1, 1, 0, "node", &channels)));
  }
  {
    std::vector<flatbuffers::Offset<msg::TensorInfo>> tensors;
    for (const msg::DType dtype : msg::EnumValuesDType()) {
      tensors.push_back(msg::CreateTensorInfoDirect(fbb, msg::EnumNameDType(dtype), dtype));
    }
    decodes(builder.finish(msg::CreateManifestDirect(fbb, nullptr, &tensors)));
  }
  for (const msg::AbortReason reason : msg::EnumValuesAbortReason()) {
    decodes(builder.finish(msg::CreateAbortDirect(fbb, 1, 2, reason, "detail")));
  }
  for (const msg::ErrorCode code : msg::EnumValuesErrorCode()) {
    decodes(builder.finish(msg::CreateErrorDirect(fbb, code, "detail")));
  }
  for (const msg::AgentState state : msg::EnumValuesAgentState()) {
    for (const msg::AgentEventKind kind : msg::EnumValuesAgentEventKind()) {
      const auto agent = msg::CreateAgentInfoDirect(fbb, "agent", msg::Role::Worker, 0, 0, 0, 0, state);
      decodes(builder.finish(msg::CreateAgentEventDirect(fbb, kind, agent)));
    }
  }
  for (const msg::RoundPhase phase : msg::EnumValuesRoundPhase()) {
    decodes(builder.finish(msg::CreateRoundTransitionDirect(fbb, 1, 2, phase)));
  }
  for (const msg::VersionFate fate : msg::EnumValuesVersionFate()) {
    decodes(builder.finish(msg::CreateVersionReportDirect(fbb, 2, fate, 1, msg::AbortReason::None, "detail", 1)));
  }
  // The enum fields appended last to Welcome and SnapshotReply.
  decodes(builder.finish(msg::CreateWelcomeDirect(fbb, "agent", 0, 0, 1, 1, 0, 100, 1500, "cb", 0, nullptr, 1, 1, 1,
                                                  true, msg::PauseMode::Keep)));
  decodes(builder.finish(msg::CreateSnapshotReplyDirect(fbb, nullptr, 1, 0, nullptr, msg::RoundPhase::Idle, 0, 0,
                                                        msg::PauseMode::Abort, false, nullptr, nullptr, 0, true,
                                                        msg::PauseMode::Keep)));
}

TEST(MessageEnums, NothingToDescribeForAcceptedOrOtherwiseRefusedBytes) {
  const Bytes valid = beginUpdateWithManifest();
  EXPECT_EQ(describeEnumViolation(valid), "");
  EXPECT_EQ(describeEnumViolation(Bytes{1, 2, 3}), "");
  EXPECT_EQ(describeEnumViolation(truncated(valid)), "");
  std::string detail = "untouched";
  EXPECT_EQ(Message::decode(zmq::message_t(valid.data(), valid.size() / 2), detail).error(),
            MessageError::Unverifiable);
  EXPECT_EQ(detail, "untouched");
}

// Union type tags are not enum-checked: a body type a newer build appended still reads as "Unknown".
TEST(MessageEnums, UnknownBodyTypeIsNotAnEnumViolation) {
  const auto future = static_cast<msg::Body>(static_cast<std::uint8_t>(msg::Body::MAX) + 1);
  const Bytes bytes = handmadeEnvelope(kProtocolVersion, true, future);
  EXPECT_TRUE(verifyMessage(bytes).has_value());
  EXPECT_EQ(describeEnumViolation(bytes), "");
}

TEST(MessageEnums, RejectionTextJoinsErrorAndDetail) {
  EXPECT_EQ(rejectionText(MessageError::Unverifiable, ""), toString(MessageError::Unverifiable));
  EXPECT_EQ(rejectionText(MessageError::EnumOutOfRange, "AgentHello.role = 77 is not one of Unknown"),
            std::string(toString(MessageError::EnumOutOfRange)) + ": AgentHello.role = 77 is not one of Unknown");
}

// What a coordinator sees: the socket hands the refusal over with the field named, and counts it.
TEST(MessageEnums, ReceivedCarriesTheDetail) {
  zmq::context_t context;
  auto router = RouterEndpoint::bind(context, "inproc://wsync-message-enums");
  ASSERT_TRUE(router.has_value()) << router.error().detail;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect("inproc://wsync-message-enums");

  MessageBuilder builder;
  const auto hostile = builder.finish(msg::CreateControlRequestDirect(
      builder.fbb(), msg::ControlAction::Pause, static_cast<msg::PauseMode>(200), nullptr, "maintenance"));
  ASSERT_TRUE(dealer.send(zmq::buffer(hostile.data(), hostile.size()), zmq::send_flags::none));
  auto received = router->receive(std::chrono::seconds(5));
  ASSERT_TRUE(received.has_value()) << received.error().detail;
  ASSERT_TRUE(received->has_value());
  const Received& delivery = **received;
  ASSERT_FALSE(delivery.message.has_value());
  EXPECT_EQ(delivery.message.error(), MessageError::EnumOutOfRange);
  EXPECT_EQ(delivery.detail, "ControlRequest.pause_mode = 200 is not one of Abort, Wait, Keep (0..2)");
  EXPECT_EQ(router->rejections().of(MessageError::EnumOutOfRange), 1U);

  builder.reset();
  const auto valid = builder.finish(msg::CreateHeartbeat(builder.fbb(), 3));
  ASSERT_TRUE(dealer.send(zmq::buffer(valid.data(), valid.size()), zmq::send_flags::none));
  received = router->receive(std::chrono::seconds(5));
  ASSERT_TRUE(received.has_value() && received->has_value());
  EXPECT_TRUE((*received)->message.has_value());
  EXPECT_EQ((*received)->detail, "");
}

}  // namespace
}  // namespace wsync::bus
