#pragma once
// The paths a latency measurement compares, behind one interface (its virtual call cancels out of the ratio):
//   bus: the library's endpoints and MessageBuilder, which verify every message they take in;
//   raw: cppzmq sockets, same options and security, frames of the same sizes carrying only the number that pairs them;
//   raw plain (only beside a bus path with CURVE): the raw path over plain tcp, what the encryption itself costs.
// Round trip: SnapshotRequest and SnapshotReply; fan-out: Pause on "round/pause", a PauseAck from each agent.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <wsync/bus/transport/bus_address.hpp>
#include <wsync/bus/transport/curve.hpp>
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

enum class Path : std::uint8_t { Bus, Raw, RawPlain };
// Every path in the order of the enum; a run has the first two or all three.
inline constexpr std::array<Path, 3> kPaths{Path::Bus, Path::Raw, Path::RawPlain};
inline std::size_t indexOf(Path path) { return static_cast<std::size_t>(path); }
inline std::string toString(Path path) { return path == Path::Bus ? "bus" : path == Path::Raw ? "raw" : "raw-plain"; }

struct Block {
  Path path = Path::Bus;
  std::size_t count = 0;
  bool measured = false;
};

// The order of the first `paths` paths, computed alike by both sides: a warm-up block each, then blocks of `block`,
// the order rotating every group (bus raw, raw bus, ...; bus raw plain, raw plain bus, plain bus raw, ...) so that
// drifting load hits every path alike.
inline std::vector<Block> interleavedSchedule(std::size_t iterations, std::size_t warmup, std::size_t block,
                                              std::size_t paths = 2) {
  paths = std::clamp<std::size_t>(paths, 1, kPaths.size());
  std::vector<Block> schedule;
  for (std::size_t p = 0; p < paths && warmup > 0; ++p) schedule.push_back({kPaths[p], warmup, false});
  const std::size_t size = std::max<std::size_t>(block, 1);
  for (std::size_t done = 0, group = 0; done < iterations; done += size, ++group) {
    const std::size_t count = std::min(size, iterations - done);
    for (std::size_t p = 0; p < paths; ++p) schedule.push_back({kPaths[(group + p) % paths], count, true});
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

// `curveServer`, `curve`: the path's sockets are CURVE servers or clients (tcp); nothing: plain. Bus and raw apply
// the same options (bus::applyCurveServer, applyCurveClient); the context's ZAP handler, if any, admits clients.
std::unique_ptr<CoordinatorPath> makeCoordinatorPath(Path path, zmq::context_t& context,
                                                     const bus::BusEndpoints& endpoints,
                                                     const std::optional<bus::CurveKeyPair>& curveServer = {});
std::unique_ptr<AgentPath> makeAgentPath(Path path, zmq::context_t& context, const bus::BusEndpoints& endpoints,
                                         const std::string& agentId, bool subscribe,
                                         const std::optional<bus::CurveClient>& curve = {});

}  // namespace wsync::bench
