#include "wsync/bus/message.hpp"

#include <time.h>

#include <cstring>

#include "wsync/bus/protocol.hpp"

namespace wsync::bus {
namespace {

// FlatBuffers reads scalars in place, so the buffer must be aligned for the widest scalar (ulong).
constexpr std::size_t kBufferAlignment = alignof(std::uint64_t);

std::uint64_t realtimeNanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(now.tv_nsec);
}

bool isAligned(const void* data) { return reinterpret_cast<std::uintptr_t>(data) % kBufferAlignment == 0; }

}  // namespace

std::string_view toString(MessageError error) {
  switch (error) {
    case MessageError::Empty: return "empty message";
    case MessageError::TooLarge: return "message larger than the protocol limit";
    case MessageError::NotWsync: return "not a wsync message (file identifier)";
    case MessageError::Unverifiable: return "message failed verification (truncated or corrupted)";
    case MessageError::ProtocolMismatch: return "message of another protocol version";
    case MessageError::MissingBody: return "message without a body";
    case MessageError::BadFraming: return "unexpected ZeroMQ framing";
  }
  return "unknown message error";
}

tl::expected<const msg::Envelope*, MessageError> verifyMessage(std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return tl::unexpected(MessageError::Empty);
  if (bytes.size() > kMaxMessageBytes) return tl::unexpected(MessageError::TooLarge);
  // The identifier check reads 8 bytes at most and tells a stray non-wsync sender apart from a corrupted message.
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength ||
      !msg::EnvelopeBufferHasIdentifier(bytes.data())) {
    return tl::unexpected(MessageError::NotWsync);
  }
  flatbuffers::Verifier::Options options;
  options.max_depth = kMaxVerifierDepth;
  options.max_tables = kMaxVerifierTables;
  options.check_alignment = true;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), options);
  if (!msg::VerifyEnvelopeBuffer(verifier)) return tl::unexpected(MessageError::Unverifiable);

  const msg::Envelope* envelope = msg::GetEnvelope(bytes.data());
  if (envelope->protocol_version() != kProtocolVersion) return tl::unexpected(MessageError::ProtocolMismatch);
  if (envelope->body_type() == msg::Body::NONE || envelope->body() == nullptr) {
    return tl::unexpected(MessageError::MissingBody);
  }
  return envelope;
}

std::span<const std::uint8_t> MessageBuilder::finishUnion(msg::Body type, flatbuffers::Offset<void> body,
                                                          EnvelopeStamp stamp) {
  msg::EnvelopeBuilder envelope(fbb_);
  envelope.add_protocol_version(kProtocolVersion);
  envelope.add_epoch(stamp.epoch);
  envelope.add_seq(stamp.seq);
  envelope.add_sent_at_ns(realtimeNanoseconds());
  envelope.add_body_type(type);
  envelope.add_body(body);
  msg::FinishEnvelopeBuffer(fbb_, envelope.Finish());
  return bytes();
}

tl::expected<Message, MessageError> Message::decode(zmq::message_t&& frame) {
  if (!isAligned(frame.data())) {
    // Rare (ZeroMQ allocates frames with malloc), but reading FlatBuffers scalars in place needs alignment.
    zmq::message_t aligned(frame.data(), frame.size());
    frame = std::move(aligned);
    if (!isAligned(frame.data())) return tl::unexpected(MessageError::Unverifiable);
  }
  auto envelope = verifyMessage({frame.data<std::uint8_t>(), frame.size()});
  if (!envelope) return tl::unexpected(envelope.error());
  return Message(std::move(frame));
}

tl::expected<Message, MessageError> Message::decode(std::span<const std::uint8_t> bytes) {
  if (bytes.size() > kMaxMessageBytes) return tl::unexpected(MessageError::TooLarge);
  return decode(zmq::message_t(bytes.data(), bytes.size()));
}

const char* bodyName(msg::Body type) {
  if (type > msg::Body::MAX) return "Unknown";
  return msg::EnumNameBody(type);
}

}  // namespace wsync::bus
