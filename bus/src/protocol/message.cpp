#include "wsync/bus/protocol/message.hpp"

#include <time.h>

#include <cstring>

#include "protocol/enum_range.hpp"
#include "wsync/bus/protocol/protocol.hpp"

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

// The Verifier checks that a vector's length field is aligned, not its elements (google/flatbuffers#8397), so a
// hostile [long] 4 bytes off passes it. TensorInfo.shape is the schema's only vector of 8-byte elements. Empty
// vectors are exempt: FlatBufferBuilder 2.0.8 does not align them, and nothing is read from them.
bool tensorShapesAligned(const msg::Manifest* manifest) {
  if (manifest == nullptr || manifest->tensors() == nullptr) return true;
  for (const msg::TensorInfo* tensor : *manifest->tensors()) {
    const auto* shape = tensor->shape();
    if (shape != nullptr && shape->size() > 0 && !isAligned(shape->data())) return false;
  }
  return true;
}

const msg::Manifest* manifestOf(const msg::Envelope& envelope) {
  if (const auto* manifest = envelope.body_as_Manifest()) return manifest;
  if (const auto* begin = envelope.body_as_BeginUpdate()) return begin->manifest();
  return nullptr;
}

// Everything verifyMessage() checks but the enum ranges: what makes the buffer safe to read in place.
tl::expected<const msg::Envelope*, MessageError> verifyStructure(std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return tl::unexpected(MessageError::Empty);
  if (bytes.size() > kMaxMessageBytes) return tl::unexpected(MessageError::TooLarge);
  // The identifier check reads 8 bytes at most and tells a stray non-wsync sender apart from a corrupted message.
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength ||
      !msg::EnvelopeBufferHasIdentifier(bytes.data())) {
    return tl::unexpected(MessageError::NotWsync);
  }
  // The Verifier checks alignment relative to the buffer's start; fields are read in place at absolute addresses.
  if (!isAligned(bytes.data())) return tl::unexpected(MessageError::Misaligned);
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
  if (!tensorShapesAligned(manifestOf(*envelope))) return tl::unexpected(MessageError::Unverifiable);
  return envelope;
}

}  // namespace

std::string_view toString(MessageError error) {
  switch (error) {
    case MessageError::Empty:
      return "empty message";
    case MessageError::TooLarge:
      return "message larger than the protocol limit";
    case MessageError::NotWsync:
      return "not a wsync message (file identifier)";
    case MessageError::Unverifiable:
      return "message failed verification (truncated or corrupted)";
    case MessageError::ProtocolMismatch:
      return "message of another protocol version";
    case MessageError::MissingBody:
      return "message without a body";
    case MessageError::BadFraming:
      return "unexpected ZeroMQ framing";
    case MessageError::Misaligned:
      return "buffer not 8-byte aligned (Message::decode realigns)";
    case MessageError::EnumOutOfRange:
      return "a field holds a value its enum does not declare";
  }
  return "unknown message error";
}

tl::expected<const msg::Envelope*, MessageError> verifyMessage(std::span<const std::uint8_t> bytes) {
  auto envelope = verifyStructure(bytes);
  if (!envelope) return envelope;
  // Last: mini-reflection reads vector elements in place, which verifyStructure() has made safe.
  if (!detail::enumsInRange(bytes.data())) return tl::unexpected(MessageError::EnumOutOfRange);
  return envelope;
}

std::string describeEnumViolation(std::span<const std::uint8_t> bytes) {
  if (!verifyStructure(bytes)) return {};
  return detail::describeFirstEnumOutOfRange(bytes.data());
}

std::string rejectionText(MessageError error, std::string_view detailText) {
  std::string text(toString(error));
  if (!detailText.empty()) {
    text += ": ";
    text += detailText;
  }
  return text;
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
  return decodeFrame(std::move(frame), nullptr);
}

tl::expected<Message, MessageError> Message::decode(zmq::message_t&& frame, std::string& rejectionDetail) {
  return decodeFrame(std::move(frame), &rejectionDetail);
}

tl::expected<Message, MessageError> Message::decodeFrame(zmq::message_t&& frame, std::string* rejectionDetail) {
  if (!isAligned(frame.data())) {
    // Common: libzmq hands out received frames at arbitrary offsets inside its receive buffer. FlatBuffers reads
    // scalars in place, which needs alignment, so the frame is copied (tens of nanoseconds for control messages;
    // a multi-megabyte manifest is sent once per change).
    zmq::message_t aligned(frame.data(), frame.size());
    frame = std::move(aligned);
    if (!isAligned(frame.data())) return tl::unexpected(MessageError::Unverifiable);
  }
  const std::span<const std::uint8_t> bytes(frame.data<std::uint8_t>(), frame.size());
  auto envelope = verifyMessage(bytes);
  if (!envelope) {
    // A second walk, on refusal only, so that the accepted path builds no text.
    if (rejectionDetail != nullptr && envelope.error() == MessageError::EnumOutOfRange) {
      *rejectionDetail = detail::describeFirstEnumOutOfRange(bytes.data());
    }
    return tl::unexpected(envelope.error());
  }
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
