#pragma once
// The two paths a latency measurement compares, behind one interface so that the same driver code runs both:
//   bus: RouterEndpoint, EventPublisher, DealerEndpoint, EventSubscriber and MessageBuilder (bus_latency.cpp);
//   raw: plain cppzmq sockets with the same options and frames of the same sizes (raw_latency.cpp).
// The virtual call is the same on both paths, so it cancels out of the ratio.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <wsync/bus/transport/bus_address.hpp>
#include <zmq.hpp>

namespace wsync::bench {

struct ReceivedAck {
  std::uint64_t round = 0;
  std::size_t agent = 0;  // index from the routing id
};

// The coordinator's side: a ROUTER for requests and acks, a PUB for pause events.
class CoordinatorPath {
 public:
  virtual ~CoordinatorPath() = default;

  // Waits up to `timeout` for one request, checks it and answers it; false when none arrived in time.
  // A malformed request or a failed send throws BenchFailure.
  virtual bool answerRequest(std::chrono::milliseconds timeout) = 0;
  virtual void publishPause(std::uint64_t round) = 0;
  // Waits up to `timeout` for one pause ack and checks it; nothing when none arrived in time.
  virtual std::optional<ReceivedAck> receiveAck(std::chrono::milliseconds timeout) = 0;
};

// An agent's side: a DEALER for requests and acks and, for the fan-out, a SUB for pause events.
class AgentPath {
 public:
  virtual ~AgentPath() = default;

  // Sends request `seq`, waits for its reply (kReplyTimeout) and checks it; throws BenchFailure otherwise.
  virtual void roundTrip(std::uint64_t seq) = 0;
  // The SUB socket, for the agent's single poll over both paths.
  virtual zmq::socket_ref eventSocket() = 0;
  // Answers every pause already waiting on the SUB socket with an ack, without waiting for more.
  virtual void answerPendingPauses() = 0;
};

std::unique_ptr<CoordinatorPath> makeBusCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints);
std::unique_ptr<CoordinatorPath> makeRawCoordinator(zmq::context_t& context, const bus::BusEndpoints& endpoints);

// `subscribe`: also connect a SUB socket to the events endpoint (fan-out agents only).
std::unique_ptr<AgentPath> makeBusAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                        const std::string& agentId, bool subscribe);
std::unique_ptr<AgentPath> makeRawAgent(zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                        const std::string& agentId, bool subscribe);

}  // namespace wsync::bench
