// The agents of the latency measurements, in processes of their own (bus.hpp).
#include <array>
#include <chrono>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "bus.hpp"
#include "latency_paths.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Opens both paths, runs `body` on them and exits; a failure is reported on stderr (the benchmark's), and the
// benchmark notices the exit and names the agent.
template <typename Body>
int servingBothPaths(const LatencyAgentOptions& options, bool subscribe, Body&& body) {
  try {
    zmq::context_t context;
    auto busPath = makeBusAgent(context, {options.busRequests, options.busEvents}, options.id, subscribe);
    auto rawPath = makeRawAgent(context, {options.rawRequests, options.rawEvents}, options.id, subscribe);
    body(*busPath, *rawPath);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "wsync-bench agent " << options.id << ": " << error.what() << '\n';
  }
  return 2;
}

}  // namespace

int runRoundTripAgent(const LatencyAgentOptions& options) {
  return servingBothPaths(options, false, [&](AgentPath& busPath, AgentPath& rawPath) {
    std::vector<std::uint64_t> busNs;
    std::vector<std::uint64_t> rawNs;
    busNs.reserve(options.iterations);
    rawNs.reserve(options.iterations);
    std::uint64_t seq = 0;
    for (const Block& block : interleavedSchedule(options.iterations, options.warmup, options.block)) {
      AgentPath& path = block.path == Path::Bus ? busPath : rawPath;
      for (std::size_t i = 0; i < block.count; ++i) {
        const auto start = Clock::now();
        path.roundTrip(++seq);
        const auto elapsed = Clock::now() - start;
        if (block.measured) {
          (block.path == Path::Bus ? busNs : rawNs)
              .push_back(static_cast<std::uint64_t>(std::chrono::nanoseconds(elapsed).count()));
        }
      }
    }
    // On stdout, a pipe the benchmark reads once it has answered the last request.
    for (const auto& [name, samples] : {std::pair{"bus", &busNs}, std::pair{"raw", &rawNs}}) {
      std::cout << name;
      for (const std::uint64_t ns : *samples) std::cout << ' ' << ns;
      std::cout << std::endl;
    }
  });
}

int runPauseAgent(const LatencyAgentOptions& options) {
  return servingBothPaths(options, true, [](AgentPath& busPath, AgentPath& rawPath) {
    // One poll over both SUB sockets: the agent waits the same way whichever path the next pause comes on.
    std::array<zmq::pollitem_t, 2> items{{{busPath.eventSocket().handle(), 0, ZMQ_POLLIN, 0},
                                          {rawPath.eventSocket().handle(), 0, ZMQ_POLLIN, 0}}};
    for (;;) {
      if (zmq::poll(items.data(), items.size(), kAgentIdleTimeout) == 0) {
        throw BenchFailure("no pause for " + std::to_string(kAgentIdleTimeout.count()) +
                           " ms: the benchmark is gone or stuck");
      }
      if ((items[0].revents & ZMQ_POLLIN) != 0) busPath.answerPendingPauses();
      if ((items[1].revents & ZMQ_POLLIN) != 0) rawPath.answerPendingPauses();
    }
  });
}

}  // namespace wsync::bench
