// The bus path of the latency measurements: everything goes through the bus library, as a coordinator and a
// worker agent would use it. Every received message is verified by the library before it is read.
#include <optional>
#include <string>
#include <utility>

#include <wsync/bus/transport/dealer_endpoint.hpp>
#include <wsync/bus/transport/event_publisher.hpp>
#include <wsync/bus/transport/event_subscriber.hpp>
#include <wsync/bus/protocol/message.hpp>
#include <wsync/bus/transport/router_endpoint.hpp>
#include <wsync/bus/protocol/topics.hpp>

#include "bench_failure.hpp"
#include "bus.hpp"
#include "latency_paths.hpp"

namespace wsync::bench {
namespace {

// The message of a delivery, or BenchFailure naming why the library rejected it.
const bus::Message& acceptedMessage(const bus::Received& received, const char* what) {
  if (!received.message) {
    throw BenchFailure(std::string("bus: rejected ") + what + " from '" + received.source +
                       "': " + std::string(bus::toString(received.message.error())));
  }
  return *received.message;
}

class BusCoordinator final : public CoordinatorPath {
 public:
  BusCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints)
      : router_(orThrow(bus::RouterEndpoint::bind(context, endpoints.requests), "bus: bind " + endpoints.requests)),
        publisher_(orThrow(bus::EventPublisher::bind(context, endpoints.events), "bus: bind " + endpoints.events)) {}

  bool answerRequest(std::chrono::milliseconds timeout) override {
    auto received = orThrow(router_.receive(timeout), "bus: receive request");
    if (!received) return false;
    const bus::Message& request = acceptedMessage(*received, "request");
    if (request.as<msg::SnapshotRequest>() == nullptr) {
      throw BenchFailure(std::string("bus: expected SnapshotRequest, got ") + bus::bodyName(request.type()));
    }
    orThrow(router_.send(received->source, buildSnapshotReply(builder_, request.seq())), "bus: send reply");
    return true;
  }

  void publishPause(std::uint64_t round) override {
    auto body = createPause(builder_, round);
    orThrow(publisher_.publish(pauseTopic(), builder_, body, kBenchEpoch), "bus: publish pause");
  }

  std::optional<ReceivedAck> receiveAck(std::chrono::milliseconds timeout) override {
    auto received = orThrow(router_.receive(timeout), "bus: receive ack");
    if (!received) return std::nullopt;
    const bus::Message& message = acceptedMessage(*received, "ack");
    const msg::PauseAck* ack = message.as<msg::PauseAck>();
    if (ack == nullptr || !ack->ok()) {
      throw BenchFailure("bus: expected an ok PauseAck from '" + received->source + "', got " +
                         bus::bodyName(message.type()));
    }
    const auto agent = pauseAgentIndex(received->source);
    if (!agent) throw BenchFailure("bus: ack from unknown routing id '" + received->source + "'");
    return ReceivedAck{ack->round(), *agent};
  }

 private:
  bus::RouterEndpoint router_;
  bus::EventPublisher publisher_;
  bus::MessageBuilder builder_;
};

class BusAgent final : public AgentPath {
 public:
  BusAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints, const std::string& agentId, bool subscribe)
      : dealer_(orThrow(bus::DealerEndpoint::connect(context, endpoints.requests, agentId),
                        "bus: connect " + endpoints.requests)) {
    if (subscribe) {
      subscriber_.emplace(orThrow(
          bus::EventSubscriber::connect(context, endpoints.events, {std::string(bus::topics::kRound)}),
          "bus: subscribe " + endpoints.events));
    }
  }

  void roundTrip(std::uint64_t seq) override {
    orThrow(dealer_.send(buildSnapshotRequest(builder_, seq)), "bus: send request");
    auto received = orThrow(dealer_.receive(kReplyTimeout), "bus: receive reply");
    if (!received) throw BenchFailure("bus: no reply to request " + std::to_string(seq) + " within the timeout");
    const bus::Message& reply = acceptedMessage(*received, "reply");
    if (reply.as<msg::SnapshotReply>() == nullptr || reply.seq() != seq) {
      throw BenchFailure("bus: expected the SnapshotReply to request " + std::to_string(seq) + ", got " +
                         bus::bodyName(reply.type()) + " " + std::to_string(reply.seq()));
    }
  }

  zmq::socket_ref eventSocket() override {
    if (!subscriber_) throw BenchFailure("bus: this agent has no event socket");
    return subscriber_->handle();
  }

  void answerPendingPauses() override {
    if (!subscriber_) throw BenchFailure("bus: this agent has no event socket");
    for (;;) {
      auto received = orThrow(subscriber_->receive(std::chrono::milliseconds{0}), "bus: receive pause");
      if (!received) return;
      const bus::Message& event = acceptedMessage(*received, "event");
      const msg::Pause* pause = event.as<msg::Pause>();
      if (pause == nullptr) {
        throw BenchFailure(std::string("bus: expected Pause, got ") + bus::bodyName(event.type()));
      }
      orThrow(dealer_.send(buildPauseAck(builder_, pause->round())), "bus: send ack");
    }
  }

 private:
  bus::DealerEndpoint dealer_;
  std::optional<bus::EventSubscriber> subscriber_;
  bus::MessageBuilder builder_;
};

}  // namespace

std::unique_ptr<CoordinatorPath> makeBusCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints) {
  return std::make_unique<BusCoordinator>(context, endpoints);
}

std::unique_ptr<AgentPath> makeBusAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                        const std::string& agentId, bool subscribe) {
  return std::make_unique<BusAgent>(context, endpoints, agentId, subscribe);
}

}  // namespace wsync::bench
