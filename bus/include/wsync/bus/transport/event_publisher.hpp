#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/transport_error.hpp"

namespace wsync::bus {

// The coordinator's event stream: a PUB socket. Every event carries the next sequence number of its topic family
// (topics::familyOf), so a subscriber sees a gap when PUB dropped something at its high-water mark and recovers
// with a snapshot, which reports each family's last number.
class EventPublisher {
 public:
  using Sequences = std::map<std::string, std::uint64_t, std::less<>>;

  // `ioThreadAffinity`, `curveServer`: as for RouterEndpoint::bind.
  static tl::expected<EventPublisher, TransportFailure> bind(zmq::context_t& context, const std::string& endpoint,
                                                             std::uint64_t ioThreadAffinity = 0,
                                                             const std::optional<CurveKeyPair>& curveServer = {});

  // Stamps `body` with its family's next sequence number and `epoch`, publishes it under `topic`, and returns
  // the number.
  template <typename Body>
  tl::expected<std::uint64_t, TransportFailure> publish(std::string_view topic, MessageBuilder& builder,
                                                        flatbuffers::Offset<Body> body, std::uint64_t epoch) {
    std::uint64_t& last = sequenceOf(topics::familyOf(topic));
    const std::uint64_t seq = last + 1;
    auto sent = sendEvent(topic, builder.finish(body, EnvelopeStamp{epoch, seq}));
    if (!sent) return tl::unexpected(sent.error());
    last = seq;
    ++published_;
    return seq;
  }

  // The last number published in `family` ("round/"), 0 before the first.
  std::uint64_t lastSequence(std::string_view family) const;
  const Sequences& sequences() const { return sequences_; }
  // Events published in all families together.
  std::uint64_t published() const { return published_; }
  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_ref handle() { return socket_; }

 private:
  EventPublisher(zmq::socket_t&& socket, std::string endpoint)
      : socket_(std::move(socket)), endpoint_(std::move(endpoint)) {}
  tl::expected<void, TransportFailure> sendEvent(std::string_view topic, std::span<const std::uint8_t> bytes);
  std::uint64_t& sequenceOf(std::string_view family);

  zmq::socket_t socket_;
  std::string endpoint_;
  Sequences sequences_;
  std::uint64_t published_ = 0;
};

}  // namespace wsync::bus
