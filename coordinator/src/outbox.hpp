#pragma once
// The one way a message leaves the coordinator: a body to an agent (stamped with this coordinator's epoch and the
// next sequence number), the same bytes to many agents, a reply to a request, or an event on the stream. A
// registered agent a message cannot reach is noted here and dropped by the coordinator between steps: a command it
// never got (a Pause, an Abort, a Commit) would leave it waiting for good. What leaves goes out on an OutboxWire:
// the coordinator's request endpoint and event stream (EndpointWire), or a recorder in the round machine's unit test
// (tests/unit/round_machine_test.cpp). Threading: the coordinator's one thread.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tl/expected.hpp>

#include "agent_registry.hpp"
#include "wsync/bus/core/log_limiter.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/transport/event_publisher.hpp"
#include "wsync/bus/transport/router_endpoint.hpp"

namespace wsync::coordinator {

// A registered agent that a message could not reach, and why.
struct Unreachable {
  std::string routingId;
  std::string why;
};

// Where the outbox's bytes go.
class OutboxWire {
 public:
  // An event whose body is built in the outbox's builder, not yet finished: the event stream finishes it with its
  // topic family's next number (publishOn: bus::EventPublisher numbers an event inside its publish, from the typed
  // body), a recorder with a stamp of its own (finish).
  class Event {
   public:
    virtual tl::expected<std::uint64_t, bus::TransportFailure> publishOn(bus::EventPublisher& events,
                                                                         std::string_view topic) const = 0;
    virtual std::span<const std::uint8_t> finish(bus::EnvelopeStamp stamp) const = 0;

   protected:
    ~Event() = default;
  };

  virtual ~OutboxWire() = default;
  virtual tl::expected<void, bus::TransportFailure> send(std::string_view peer,
                                                         std::span<const std::uint8_t> bytes) = 0;
  virtual void publish(std::string_view topic, const Event& event) = 0;
  // Events published in all families together (the control block counts them).
  virtual std::uint64_t published() const = 0;
};

// The coordinator's wire: addressed messages on its ROUTER, events on its PUB. `router` may be rebound (moved into)
// while the wire lives: it is read at every send.
class EndpointWire final : public OutboxWire {
 public:
  EndpointWire(bus::RouterEndpoint& router, bus::EventPublisher& events) : router_(router), events_(events) {}

  tl::expected<void, bus::TransportFailure> send(std::string_view peer, std::span<const std::uint8_t> bytes) override {
    return router_.send(peer, bytes);
  }
  void publish(std::string_view topic, const Event& event) override { (void)event.publishOn(events_, topic); }
  std::uint64_t published() const override { return events_.published(); }

 private:
  bus::RouterEndpoint& router_;
  bus::EventPublisher& events_;
};

class Outbox {
 public:
  Outbox(OutboxWire& wire, bus::ControlBlockOwner& block, const AgentRegistry& agents, bus::LogLimiter& logLimiter)
      : wire_(wire), block_(block), agents_(agents), logLimiter_(logLimiter) {}
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Starts a message: the builder the body is built in, cleared. The body then leaves through stamp() and send(),
  // reply() or publish(); its bytes stay valid until the next start().
  flatbuffers::FlatBufferBuilder& start() {
    builder_.reset();
    return builder_.fbb();
  }
  // `body` in an envelope with this coordinator's epoch and the next sequence number: one message for many peers.
  template <typename Body>
  std::span<const std::uint8_t> stamp(flatbuffers::Offset<Body> body) {
    return builder_.finish(body, bus::EnvelopeStamp{block_.epoch(), ++sentSeq_});
  }
  template <typename Body>
  void send(const std::string& peer, flatbuffers::Offset<Body> body) {
    send(peer, stamp(body));
  }
  void send(const std::string& peer, std::span<const std::uint8_t> bytes);
  // The answer to request `inReplyTo`, stamped with the request's own sequence number (VersionQuery, control).
  template <typename Body>
  void reply(const std::string& peer, std::uint64_t inReplyTo, flatbuffers::Offset<Body> body) {
    send(peer, builder_.finish(body, bus::EnvelopeStamp{block_.epoch(), inReplyTo}));
  }
  // An Error for `peer` about its request `inReplyTo`; it carries the committed version so a client can resync.
  void refuse(const std::string& peer, std::uint64_t inReplyTo, msg::ErrorCode code, const std::string& detail,
              std::uint64_t committedVersion);
  // `body` on `topic` of the event stream, counted in the control block.
  template <typename Body>
  void publish(const std::string& topic, flatbuffers::Offset<Body> body) {
    wire_.publish(topic, BuiltEvent<Body>{builder_, body, block_.epoch()});
    block_.setEventsPublished(wire_.published());
  }

  // A registered agent the coordinator must drop (its connection went with the request endpoint).
  void noteUnreachable(const std::string& routingId, const std::string& why);
  // The agents found unreachable since the last call, oldest first.
  std::vector<Unreachable> takeUnreachable() { return std::exchange(unreachable_, {}); }
  bool anyUnreachable() const { return !unreachable_.empty(); }

 private:
  template <typename Body>
  class BuiltEvent final : public OutboxWire::Event {
   public:
    BuiltEvent(bus::MessageBuilder& builder, flatbuffers::Offset<Body> body, std::uint64_t epoch)
        : builder_(builder), body_(body), epoch_(epoch) {}
    tl::expected<std::uint64_t, bus::TransportFailure> publishOn(bus::EventPublisher& events,
                                                                 std::string_view topic) const override {
      return events.publish(topic, builder_, body_, epoch_);
    }
    std::span<const std::uint8_t> finish(bus::EnvelopeStamp stamp) const override {
      return builder_.finish(body_, stamp);
    }

   private:
    bus::MessageBuilder& builder_;
    flatbuffers::Offset<Body> body_;
    std::uint64_t epoch_;
  };

  OutboxWire& wire_;
  bus::ControlBlockOwner& block_;
  const AgentRegistry& agents_;
  bus::LogLimiter& logLimiter_;
  bus::MessageBuilder builder_{4096};
  std::uint64_t sentSeq_ = 0;
  std::vector<Unreachable> unreachable_;
};

}  // namespace wsync::coordinator
