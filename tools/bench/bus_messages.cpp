#include "latency_paths.hpp"

#include <charconv>
#include <cstring>
#include <string>
#include <vector>

#include <wsync/bus/protocol/topics.hpp>

namespace wsync::bench {

std::span<const std::uint8_t> buildSnapshotRequest(bus::MessageBuilder& builder, std::uint64_t seq) {
  builder.reset();
  auto body = msg::CreateSnapshotRequest(builder.fbb());
  return builder.finish(body, bus::EnvelopeStamp{kBenchEpoch, seq});
}

std::span<const std::uint8_t> buildSnapshotReply(bus::MessageBuilder& builder, std::uint64_t inReplyTo) {
  builder.reset();
  const msg::Digest128 digest(0x0123456789abcdefULL, 0xfedcba9876543210ULL);
  auto& fbb = builder.fbb();
  const std::vector<flatbuffers::Offset<msg::TopicSequence>> sequences{
      msg::CreateTopicSequenceDirect(fbb, std::string(bus::topics::kRound).c_str(), inReplyTo)};
  auto body = msg::CreateSnapshotReplyDirect(fbb, &sequences, kBenchEpoch, kBenchVersion, nullptr,
                                             msg::RoundPhase::Idle, inReplyTo, kBenchVersion, msg::PauseMode::Abort,
                                             false, &digest);
  return builder.finish(body, bus::EnvelopeStamp{kBenchEpoch, inReplyTo});
}

flatbuffers::Offset<msg::Pause> createPause(bus::MessageBuilder& builder, std::uint64_t round) {
  builder.reset();
  const msg::Digest128 digest(0x0123456789abcdefULL, 0xfedcba9876543210ULL);
  return msg::CreatePause(builder.fbb(), round, kBenchVersion, msg::PauseMode::Wait, &digest);
}

std::span<const std::uint8_t> buildPauseAck(bus::MessageBuilder& builder, std::uint64_t round) {
  builder.reset();
  auto body = msg::CreatePauseAck(builder.fbb(), round, true, kBenchVersion - 1, msg::AbortReason::None);
  return builder.finish(body, bus::EnvelopeStamp{kBenchEpoch, round});
}

MessageSizes busMessageSizes() {
  bus::MessageBuilder builder;
  MessageSizes sizes;
  sizes.request = buildSnapshotRequest(builder, 1).size();
  sizes.reply = buildSnapshotReply(builder, 1).size();
  // Stamped as EventPublisher::publish stamps it.
  auto pause = createPause(builder, 1);
  sizes.pause = builder.finish(pause, bus::EnvelopeStamp{kBenchEpoch, 1}).size();
  sizes.pauseAck = buildPauseAck(builder, 1).size();
  return sizes;
}

const std::string& pauseTopic() {
  static const std::string topic = std::string(bus::topics::kRound) + "pause";
  return topic;
}

void stampFrame(std::span<std::uint8_t> frame, std::uint64_t number) {
  std::memcpy(frame.data(), &number, sizeof(number));
}

std::uint64_t readStamp(std::span<const std::uint8_t> frame) {
  std::uint64_t number = 0;
  std::memcpy(&number, frame.data(), sizeof(number));
  return number;
}

std::string pauseAgentId(std::size_t measurement, std::size_t index) {
  return "f" + std::to_string(measurement) + "-" + std::to_string(index);
}

std::optional<std::size_t> pauseAgentIndex(std::string_view agentId) {
  // The bus's DealerEndpoint appends "#<nonce>" to the label; raw ZeroMQ agents use the label as it is.
  agentId = agentId.substr(0, agentId.find('#'));
  const std::size_t dash = agentId.rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::size_t index = 0;
  const char* first = agentId.data() + dash + 1;
  const char* last = agentId.data() + agentId.size();
  auto [end, error] = std::from_chars(first, last, index);
  if (error != std::errc{} || end != last) return std::nullopt;
  return index;
}

}  // namespace wsync::bench
