#pragma once
// The two paths a latency measurement compares, their messages and their schedule. Behind one interface, so that the
// same driver code runs both:
//   bus: RouterEndpoint, EventPublisher, DealerEndpoint, EventSubscriber and MessageBuilder (bus_latency.cpp), which
//        verify every message they take in;
//   raw: plain cppzmq sockets with the same options and frames of the same sizes, carrying only the number that pairs
//        a reply with its request: no encoding, no verification (raw_latency.cpp).
// The virtual call is the same on both paths, so it cancels out of the ratio. The messages:
//   round trip:  agent -> coordinator SnapshotRequest, coordinator -> agent SnapshotReply (the protocol's
//                request/reply pair of a late joiner); the reply's envelope seq is the request's.
//   fan-out:     coordinator -> agents Pause on "round/pause", each agent -> coordinator PauseAck of that round.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <wsync/bus/transport/bus_address.hpp>
#include <wsync/bus/protocol/message.hpp>
#include <wsync/schemas/control_generated.h>
#include <zmq.hpp>

namespace wsync::bench {

// The coordinator's epoch in every message (nonzero, so every field is present and every message of a kind has the
// same size whatever its sequence number).
inline constexpr std::uint64_t kBenchEpoch = 1;
inline constexpr std::uint64_t kBenchVersion = 7;

std::span<const std::uint8_t> buildSnapshotRequest(bus::MessageBuilder& builder, std::uint64_t seq);
std::span<const std::uint8_t> buildSnapshotReply(bus::MessageBuilder& builder, std::uint64_t inReplyTo);
// The body only: EventPublisher::publish stamps and finishes it.
flatbuffers::Offset<msg::Pause> createPause(bus::MessageBuilder& builder, std::uint64_t round);
std::span<const std::uint8_t> buildPauseAck(bus::MessageBuilder& builder, std::uint64_t round);

// Sizes of the bus messages above, which the raw frames copy.
struct MessageSizes {
  std::size_t request = 0;
  std::size_t reply = 0;
  std::size_t pause = 0;
  std::size_t pauseAck = 0;
};
MessageSizes busMessageSizes();

// "round/pause": the topic of a Pause event, for both paths.
const std::string& pauseTopic();

// Raw frames carry their pairing number in their first 8 bytes (every frame is at least that long).
void stampFrame(std::span<std::uint8_t> frame, std::uint64_t number);
std::uint64_t readStamp(std::span<const std::uint8_t> frame);

// Routing ids: "rt" for the round-trip agent; "f<measurement>-<index>" for the fan-out agents, unique per fan-out
// measurement, because a ROUTER refuses a new peer whose routing id still belongs to a connection it has not yet
// seen close (an agent of the previous measurement).
inline constexpr std::string_view kRoundTripAgentId = "rt";
std::string pauseAgentId(std::size_t measurement, std::size_t index);
std::optional<std::size_t> pauseAgentIndex(std::string_view agentId);

enum class Path : std::uint8_t { Bus, Raw };
inline std::string_view toString(Path path) { return path == Path::Bus ? "bus" : "raw"; }

struct Block {
  Path path = Path::Bus;
  std::size_t count = 0;
  bool measured = false;
};

// The order in which the paths run, which both sides of a measurement (the coordinator and the round-trip agent)
// compute from the same numbers, so each knows which socket the next message uses: a warm-up block per path, then
// `iterations` per path in blocks of `block`, alternating bus and raw and flipping the order every pair (bus raw,
// raw bus, ...) so that drifting machine load hits both paths alike.
inline std::vector<Block> interleavedSchedule(std::size_t iterations, std::size_t warmup, std::size_t block) {
  std::vector<Block> schedule;
  if (warmup > 0) schedule.insert(schedule.end(), {{Path::Bus, warmup, false}, {Path::Raw, warmup, false}});
  const std::size_t blockSize = std::max<std::size_t>(block, 1);
  for (std::size_t done = 0, pair = 0; done < iterations; done += blockSize, ++pair) {
    const std::size_t count = std::min(blockSize, iterations - done);
    const Path first = pair % 2 == 0 ? Path::Bus : Path::Raw;
    schedule.insert(schedule.end(), {{first, count, true}, {first == Path::Bus ? Path::Raw : Path::Bus, count, true}});
  }
  return schedule;
}

struct ReceivedAck {
  std::uint64_t round = 0;
  std::size_t agent = 0;  // index from the routing id
};

// The coordinator's side: a ROUTER for requests and acks, a PUB for pause events.
class CoordinatorPath {
 public:
  virtual ~CoordinatorPath() = default;
  // Waits up to `timeout` for one request, checks it and answers it; false when none arrived in time. A malformed
  // request or a failed send throws BenchFailure.
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
