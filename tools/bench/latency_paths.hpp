#pragma once
// The two paths a latency measurement compares, behind one interface so that the same driver code runs both:
//   bus: RouterEndpoint, EventPublisher, DealerEndpoint, EventSubscriber and MessageBuilder, which verify every
//        message they take in;
//   raw: plain cppzmq sockets with the same options and frames of the same sizes, carrying only the number that pairs
//        a reply with its request: no encoding, no verification.
// The virtual call is the same on both paths, so it cancels out of the ratio. The messages: round trip, agent ->
// coordinator SnapshotRequest and back a SnapshotReply (a late joiner's request/reply pair); fan-out, coordinator ->
// agents Pause on "round/pause", each agent -> coordinator PauseAck of that round.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <wsync/bus/transport/bus_address.hpp>
#include <zmq.hpp>

namespace wsync::bench {

// Sizes of the bus messages, which the raw frames copy.
struct MessageSizes {
  std::size_t request = 0, reply = 0, pause = 0, pauseAck = 0;
};
MessageSizes busMessageSizes();

// Routing ids: "rt" for the round-trip agent; "f<measurement>-<index>" for the fan-out agents, unique per fan-out
// measurement, because a ROUTER refuses a new peer whose routing id still belongs to a connection it has not yet
// seen close (an agent of the previous measurement).
inline constexpr std::string_view kRoundTripAgentId = "rt";
inline std::string pauseAgentId(std::size_t measurement, std::size_t index) {
  return "f" + std::to_string(measurement) + "-" + std::to_string(index);
}

enum class Path : std::uint8_t { Bus, Raw };
inline std::string toString(Path path) { return path == Path::Bus ? "bus" : "raw"; }

struct Block {
  Path path = Path::Bus;
  std::size_t count = 0;
  bool measured = false;
};

// The order in which the paths run, which both sides of a measurement (the coordinator and the round-trip agent)
// compute alike, so each knows which socket the next message uses: a warm-up block per path, then `iterations` per
// path in blocks of `block`, alternating and flipping the order every pair (bus raw, raw bus, ...) so that drifting
// machine load hits both paths alike.
inline std::vector<Block> interleavedSchedule(std::size_t iterations, std::size_t warmup, std::size_t block) {
  std::vector<Block> schedule;
  if (warmup > 0) schedule.insert(schedule.end(), {{Path::Bus, warmup, false}, {Path::Raw, warmup, false}});
  const std::size_t size = std::max<std::size_t>(block, 1);
  for (std::size_t done = 0, pair = 0; done < iterations; done += size, ++pair) {
    const std::size_t count = std::min(size, iterations - done);
    const Path first = pair % 2 == 0 ? Path::Bus : Path::Raw;
    schedule.insert(schedule.end(), {{first, count, true}, {first == Path::Bus ? Path::Raw : Path::Bus, count, true}});
  }
  return schedule;
}

struct ReceivedAck {
  std::uint64_t round = 0;
  std::size_t agent = 0;  // index from the routing id
};

// The coordinator's side: a ROUTER for requests and acks, a PUB for pause events. A malformed message or a failed
// send throws. answerRequest: false when no request arrived within `timeout`.
class CoordinatorPath {
 public:
  virtual ~CoordinatorPath() = default;
  virtual bool answerRequest(std::chrono::milliseconds timeout) = 0;
  virtual void publishPause(std::uint64_t round) = 0;
  virtual std::optional<ReceivedAck> receiveAck(std::chrono::milliseconds timeout) = 0;
};

// An agent's side: a DEALER for requests and acks and, for the fan-out, a SUB for pause events (its socket for the
// agent's single poll over both paths). roundTrip waits up to kReplyTimeout for the reply; answerPendingPauses answers
// the pauses already waiting, without waiting for more.
class AgentPath {
 public:
  virtual ~AgentPath() = default;
  virtual void roundTrip(std::uint64_t seq) = 0;
  virtual zmq::socket_ref eventSocket() = 0;
  virtual void answerPendingPauses() = 0;
};

std::unique_ptr<CoordinatorPath> makeCoordinatorPath(Path path, zmq::context_t& context,
                                                     const bus::BusEndpoints& endpoints);
// `subscribe`: also connect a SUB socket to the events endpoint (fan-out agents only).
std::unique_ptr<AgentPath> makeAgentPath(Path path, zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                         const std::string& agentId, bool subscribe);

}  // namespace wsync::bench
