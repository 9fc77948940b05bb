#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/message.hpp"
#include "wsync/bus/transport_error.hpp"

namespace wsync::bus {

// The coordinator's event stream: a PUB socket. Every event carries the next sequence number, so a subscriber
// sees a gap when PUB dropped something at its high-water mark and recovers with a snapshot.
class EventPublisher {
 public:
  static tl::expected<EventPublisher, TransportFailure> bind(zmq::context_t& context, const std::string& endpoint);

  // Stamps `body` with the next sequence number and `epoch`, publishes it under `topic`, and returns the number.
  template <typename Body>
  tl::expected<std::uint64_t, TransportFailure> publish(std::string_view topic, MessageBuilder& builder,
                                                        flatbuffers::Offset<Body> body, std::uint64_t epoch) {
    const std::uint64_t seq = lastSequence_ + 1;
    auto sent = sendEvent(topic, builder.finish(body, EnvelopeStamp{epoch, seq}));
    if (!sent) return tl::unexpected(sent.error());
    lastSequence_ = seq;
    return seq;
  }

  std::uint64_t lastSequence() const { return lastSequence_; }
  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_ref handle() { return socket_; }

 private:
  EventPublisher(zmq::socket_t&& socket, std::string endpoint)
      : socket_(std::move(socket)), endpoint_(std::move(endpoint)) {}
  tl::expected<void, TransportFailure> sendEvent(std::string_view topic, std::span<const std::uint8_t> bytes);

  zmq::socket_t socket_;
  std::string endpoint_;
  std::uint64_t lastSequence_ = 0;
};

}  // namespace wsync::bus
