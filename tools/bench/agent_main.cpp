#include "agent_main.hpp"

#include <array>
#include <chrono>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "bench_config.hpp"
#include "bench_failure.hpp"
#include "latency_paths.hpp"
#include "schedule.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

bus::BusEndpoints busEndpoints(const AgentOptions& options) { return {options.busRequests, options.busEvents}; }
bus::BusEndpoints rawEndpoints(const AgentOptions& options) { return {options.rawRequests, options.rawEvents}; }

// An agent reports its own failure on stderr (inherited from the benchmark) and exits non-zero; the benchmark
// notices the exit and names the agent.
template <typename Body>
int reportingFailures(const AgentOptions& options, Body&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "wsync-bench agent " << options.id << ": " << error.what() << '\n';
  }
  return 2;
}

// One line of samples on stdout (a pipe the benchmark reads once the round trips are done).
void writeSamples(const char* path, const std::vector<std::uint64_t>& samples) {
  std::string line = path;
  for (const std::uint64_t sample : samples) line += " " + std::to_string(sample);
  std::cout << line << std::endl;
}

}  // namespace

int runRoundTripAgent(const AgentOptions& options) {
  return reportingFailures(options, [&] {
    zmq::context_t context;
    auto busPath = makeBusAgent(context, busEndpoints(options), options.id, false);
    auto rawPath = makeRawAgent(context, rawEndpoints(options), options.id, false);

    std::vector<std::uint64_t> busNs;
    std::vector<std::uint64_t> rawNs;
    busNs.reserve(options.iterations);
    rawNs.reserve(options.iterations);
    std::uint64_t seq = 0;
    for (const Block& block : interleavedSchedule(options.iterations, options.warmup, options.block)) {
      AgentPath& path = block.path == Path::Bus ? *busPath : *rawPath;
      std::vector<std::uint64_t>& out = block.path == Path::Bus ? busNs : rawNs;
      for (std::size_t i = 0; i < block.count; ++i) {
        const auto start = Clock::now();
        path.roundTrip(++seq);
        const auto elapsed = Clock::now() - start;
        if (block.measured) {
          out.push_back(static_cast<std::uint64_t>(std::chrono::nanoseconds(elapsed).count()));
        }
      }
    }
    writeSamples("bus", busNs);
    writeSamples("raw", rawNs);
  });
}

int runPauseAgent(const AgentOptions& options) {
  return reportingFailures(options, [&] {
    zmq::context_t context;
    auto busPath = makeBusAgent(context, busEndpoints(options), options.id, true);
    auto rawPath = makeRawAgent(context, rawEndpoints(options), options.id, true);
    // One poll over both SUB sockets: the agent waits the same way whichever path the next pause comes on.
    std::array<zmq::pollitem_t, 2> items{{
        {busPath->eventSocket().handle(), 0, ZMQ_POLLIN, 0},
        {rawPath->eventSocket().handle(), 0, ZMQ_POLLIN, 0},
    }};
    for (;;) {
      if (zmq::poll(items.data(), items.size(), kAgentIdleTimeout) == 0) {
        throw BenchFailure("no pause for " + std::to_string(kAgentIdleTimeout.count()) +
                           " ms: the benchmark is gone or stuck");
      }
      if ((items[0].revents & ZMQ_POLLIN) != 0) busPath->answerPendingPauses();
      if ((items[1].revents & ZMQ_POLLIN) != 0) rawPath->answerPendingPauses();
    }
  });
}

}  // namespace wsync::bench
