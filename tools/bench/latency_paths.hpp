#pragma once
// The two paths a latency measurement compares, behind one interface (its virtual call cancels out of the ratio):
//   bus: the library's endpoints and MessageBuilder, which verify every message they take in;
//   raw: cppzmq sockets, same options, frames of the same sizes carrying only the number that pairs them.
// Round trip: SnapshotRequest and SnapshotReply; fan-out: Pause on "round/pause", a PauseAck from each agent.
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

// Fan-out ids are unique per measurement: a ROUTER refuses a routing id whose old connection it has not seen close.
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

// The order of the paths, computed alike by both sides: a warm-up block each, then blocks of `block`, the order
// flipping every pair (bus raw, raw bus, ...) so that drifting load hits both alike.
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

// The coordinator's side: a ROUTER for requests and acks, a PUB for pauses. A malformed message or failed send throws.
class CoordinatorPath {
 public:
  virtual ~CoordinatorPath() = default;
  virtual bool answerRequest(std::chrono::milliseconds timeout) = 0;
  virtual void publishPause(std::uint64_t round) = 0;
  virtual std::optional<ReceivedAck> receiveAck(std::chrono::milliseconds timeout) = 0;
};

// An agent's side: a DEALER and, for the fan-out, a SUB (eventSocket, for one poll over both paths).
class AgentPath {
 public:
  virtual ~AgentPath() = default;
  virtual void roundTrip(std::uint64_t seq) = 0;
  virtual zmq::socket_ref eventSocket() = 0;
  virtual void answerPendingPauses() = 0;
};

std::unique_ptr<CoordinatorPath> makeCoordinatorPath(Path path, zmq::context_t& context,
                                                     const bus::BusEndpoints& endpoints);
std::unique_ptr<AgentPath> makeAgentPath(Path path, zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                         const std::string& agentId, bool subscribe);

}  // namespace wsync::bench
