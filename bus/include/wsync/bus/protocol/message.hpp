#pragma once
// Control messages: building them (MessageBuilder) and taking them in (Message::decode), always through the
// FlatBuffers Verifier before any field is read.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/protocol/message_error.hpp"

namespace wsync::bus {

// Checks a buffer and returns its envelope. Nothing in `bytes` is read before the Verifier has passed it; after it,
// every enum-typed field anywhere in the message must hold a value its enum declares (EnumOutOfRange), so that no
// role switches on `pause_mode: 200`. Union type tags are the exception: a body type a newer build appended reads
// as "Unknown" (bodyName()). `bytes` must stay alive while the envelope is used and be 8-byte aligned (else
// Misaligned); Message::decode realigns what it is given.
tl::expected<const msg::Envelope*, MessageError> verifyMessage(std::span<const std::uint8_t> bytes);

// Which field made verifyMessage() answer EnumOutOfRange, with its value and what its enum declares:
// "ControlRequest.pause_mode = 200 is not one of Abort, Wait, Keep (0..2)". Empty when the bytes are refused for
// another reason or accepted. Walks the message again: meant for the refusal path only. Needs 8-byte aligned bytes.
std::string describeEnumViolation(std::span<const std::uint8_t> bytes);

// A refusal for the sender or a log: toString(error), then ": " and `detailText` when there is one (the field an
// EnumOutOfRange names, as Received::detail carries it).
std::string rejectionText(MessageError error, std::string_view detailText);

// What the sender stamps on every envelope.
struct EnvelopeStamp {
  std::uint64_t epoch = 0;
  std::uint64_t seq = 0;
};

// Builds one message at a time; reuse it to keep its buffer. Create the body with the generated CreateXxx()
// helpers on fbb(), then finish(). The bytes stay valid until the next reset() or finish().
class MessageBuilder {
 public:
  explicit MessageBuilder(std::size_t initialBytes = 1024) : fbb_(initialBytes) {}

  flatbuffers::FlatBufferBuilder& fbb() { return fbb_; }

  template <typename Body>
  std::span<const std::uint8_t> finish(flatbuffers::Offset<Body> body, EnvelopeStamp stamp = {}) {
    return finishUnion(msg::BodyTraits<Body>::enum_value, body.Union(), stamp);
  }

  std::span<const std::uint8_t> bytes() const { return {fbb_.GetBufferPointer(), fbb_.GetSize()}; }
  void reset() { fbb_.Clear(); }

 private:
  std::span<const std::uint8_t> finishUnion(msg::Body type, flatbuffers::Offset<void> body, EnvelopeStamp stamp);

  flatbuffers::FlatBufferBuilder fbb_;
};

// A received, verified message. It owns its bytes (the ZeroMQ frame they arrived in, or an aligned copy of it when
// libzmq delivered it at an address FlatBuffers cannot read in place), so the accessors stay valid as long as the
// Message lives.
class Message {
 public:
  static tl::expected<Message, MessageError> decode(zmq::message_t&& frame);
  // As above; when the message is refused for EnumOutOfRange, `rejectionDetail` is set to the field, value and
  // declared values (describeEnumViolation()), and left alone otherwise.
  static tl::expected<Message, MessageError> decode(zmq::message_t&& frame, std::string& rejectionDetail);
  static tl::expected<Message, MessageError> decode(std::span<const std::uint8_t> bytes);

  // Derived on each call rather than cached: ZeroMQ keeps small messages inside the message object, so their
  // address changes when a Message is moved.
  const msg::Envelope& envelope() const { return *flatbuffers::GetRoot<msg::Envelope>(frame_.data()); }
  msg::Body type() const { return envelope().body_type(); }
  std::uint64_t seq() const { return envelope().seq(); }
  std::uint64_t epoch() const { return envelope().epoch(); }

  // The body if it is a `Body`, else nullptr.
  template <typename Body>
  const Body* as() const {
    return envelope().body_as<Body>();
  }

  std::span<const std::uint8_t> bytes() const { return {frame_.data<std::uint8_t>(), frame_.size()}; }

 private:
  explicit Message(zmq::message_t&& frame) : frame_(std::move(frame)) {}
  static tl::expected<Message, MessageError> decodeFrame(zmq::message_t&& frame, std::string* rejectionDetail);

  zmq::message_t frame_;
};

// Name of a body type for logs ("Pause"), or "Unknown" for a member added by a newer protocol.
const char* bodyName(msg::Body type);

}  // namespace wsync::bus
