#include "latency_benchmark.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string_view>
#include <utility>

#include <wsync/bus/transport/bus_address.hpp>
#include <zmq.hpp>

#include "agent_processes.hpp"
#include "bench_failure.hpp"
#include "interruption.hpp"
#include "latency_paths.hpp"
#include "run_files.hpp"
#include "samples_file.hpp"
#include "schedule.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t nanosecondsSince(Clock::time_point start) {
  return static_cast<std::uint64_t>(std::chrono::nanoseconds(Clock::now() - start).count());
}

std::chrono::milliseconds remainingUntil(Clock::time_point deadline) {
  // Rounded up, so that a wait does not end early and spin on 0 ms ("just look"); never negative, which the
  // endpoints would take as "wait forever".
  return std::max(std::chrono::milliseconds{0},
                  std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Where both paths live: two bus names unique to this run, resolved to ipc:// endpoints in the runtime folder.
struct BenchEndpoints {
  std::string runtimeDir;
  std::string busName;
  bus::BusEndpoints bus;
  bus::BusEndpoints raw;
};

BenchEndpoints resolveBenchEndpoints() {
  BenchEndpoints endpoints;
  endpoints.busName = "wsync-bench-" + std::to_string(::getpid());
  auto busEndpoints = bus::resolveEndpoints(endpoints.busName);
  auto rawEndpoints = bus::resolveEndpoints(endpoints.busName + "-raw");
  auto dir = bus::runtimeDirectory();
  if (!busEndpoints) throw BenchFailure("endpoints: " + busEndpoints.error().describe());
  if (!rawEndpoints) throw BenchFailure("endpoints: " + rawEndpoints.error().describe());
  if (!dir) throw BenchFailure("runtime folder: " + dir.error().describe());
  endpoints.bus = *busEndpoints;
  endpoints.raw = *rawEndpoints;
  endpoints.runtimeDir = *dir;
  return endpoints;
}

std::vector<std::string> agentArgs(std::string_view role, std::string_view id, const BenchEndpoints& endpoints) {
  return {std::string(role),
          "--parent", std::to_string(::getpid()),
          "--id", std::string(id),
          "--bus-requests", endpoints.bus.requests,
          "--bus-events", endpoints.bus.events,
          "--raw-requests", endpoints.raw.requests,
          "--raw-events", endpoints.raw.events};
}

struct Coordinators {
  std::unique_ptr<CoordinatorPath> bus;
  std::unique_ptr<CoordinatorPath> raw;
  CoordinatorPath& of(Path path) { return path == Path::Bus ? *bus : *raw; }
};

LatencyComparison measureRoundTrip(const BusBenchConfig& config, const BenchEndpoints& endpoints,
                                   Coordinators& coordinators, std::ostream& progress) {
  const std::size_t warmup = warmupFor(config.roundTrips);
  const std::string samplesPath = endpoints.runtimeDir + "/" + endpoints.busName + ".rtt";
  progress << "round trip: " << config.roundTrips << " per path (+" << warmup << " warm-up), blocks of "
           << config.block << '\n';

  RunFiles runFiles;  // the samples file, should a failure leave it behind
  runFiles.add(samplesPath);
  AgentProcesses agents;
  std::vector<std::string> args = agentArgs("agent-roundtrip", kRoundTripAgentId, endpoints);
  args.insert(args.end(), {"--iterations", std::to_string(config.roundTrips), "--warmup", std::to_string(warmup),
                           "--block", std::to_string(config.block), "--samples", samplesPath});
  agents.spawn("round-trip agent", args);

  // The agent drives; the coordinator follows the same schedule, so it knows which socket the next request uses.
  bool first = true;
  for (const Block& block : interleavedSchedule(config.roundTrips, warmup, config.block)) {
    throwIfInterrupted();
    CoordinatorPath& path = coordinators.of(block.path);
    for (std::size_t i = 0; i < block.count; ++i) {
      // The first request also waits for the agent process to start.
      const auto timeout = first ? kJoinTimeout : kReplyTimeout;
      if (!path.answerRequest(timeout)) {
        agents.throwIfAnyExited();
        throw BenchFailure("round trip: no request on the " + std::string(toString(block.path)) + " path within " +
                           std::to_string(timeout.count()) + " ms");
      }
      first = false;
    }
  }
  agents.waitForAll(kAgentExitTimeout);
  RoundTripSamples samples = takeSamples(samplesPath);
  if (samples.busNs.size() != config.roundTrips || samples.rawNs.size() != config.roundTrips) {
    throw BenchFailure("round trip: the agent returned " + std::to_string(samples.busNs.size()) + " bus and " +
                       std::to_string(samples.rawNs.size()) + " raw samples, expected " +
                       std::to_string(config.roundTrips) + " each");
  }
  return {summarize(std::move(samples.busNs)), summarize(std::move(samples.rawNs))};
}

// One path's state in the fan-out: round numbers only grow, so an ack to an earlier round (a probe) is told
// apart from an ack to the round being timed.
struct PauseRun {
  CoordinatorPath& path;
  std::uint64_t nextRound = 1;
  std::uint64_t staleAcks = 0;
};

// The slow-joiner problem, solved deterministically: PUB drops events for a SUB whose subscription has not
// arrived yet, so probe pauses go out until every agent has acked one on this path. An ack proves both the
// agent's subscription and its DEALER connection.
void joinAgents(PauseRun& run, Path path, std::size_t agentCount, AgentProcesses& agents) {
  std::vector<bool> joined(agentCount, false);
  std::size_t joinedCount = 0;
  const auto deadline = Clock::now() + kJoinTimeout;
  while (joinedCount < agentCount) {
    throwIfInterrupted();
    agents.throwIfAnyExited();  // an agent that failed to start is reported now, not at the deadline
    if (Clock::now() > deadline) {
      throw BenchFailure("fan-out: only " + std::to_string(joinedCount) + " of " + std::to_string(agentCount) +
                         " agents answered a probe on the " + std::string(toString(path)) + " path within " +
                         std::to_string(kJoinTimeout.count()) + " ms");
    }
    run.path.publishPause(run.nextRound++);
    const auto probeEnd = Clock::now() + kProbeInterval;
    while (Clock::now() < probeEnd) {
      const auto ack = run.path.receiveAck(remainingUntil(probeEnd));
      if (!ack) break;
      if (ack->agent >= agentCount) throw BenchFailure("fan-out: ack from agent index " + std::to_string(ack->agent));
      if (!joined[ack->agent]) {
        joined[ack->agent] = true;
        ++joinedCount;
      }
    }
  }
}

// Lets the acks to the last probes arrive, so that the first timed rounds do not pay for them.
void drainAcks(PauseRun& run) {
  const auto deadline = Clock::now() + kJoinTimeout;
  while (Clock::now() < deadline && run.path.receiveAck(kDrainQuiet)) {
  }
}

// Time from just before the Pause is built and published until the N-th verified ack of that round is in.
std::uint64_t measurePauseRound(PauseRun& run, Path path, std::size_t agentCount, AgentProcesses& agents) {
  const std::uint64_t round = run.nextRound++;
  const auto start = Clock::now();
  run.path.publishPause(round);
  std::size_t acks = 0;
  while (acks < agentCount) {
    const auto ack = run.path.receiveAck(kReplyTimeout);
    if (!ack) {
      agents.throwIfAnyExited();
      throw BenchFailure("fan-out: " + std::to_string(acks) + " of " + std::to_string(agentCount) +
                         " acks to round " + std::to_string(round) + " on the " + std::string(toString(path)) +
                         " path within " + std::to_string(kReplyTimeout.count()) + " ms");
    }
    if (ack->round == round) {
      ++acks;
    } else if (ack->round < round) {
      ++run.staleAcks;
    } else {
      throw BenchFailure("fan-out: ack to round " + std::to_string(ack->round) + ", which was never published");
    }
  }
  return nanosecondsSince(start);
}

FanoutResult measureFanout(const BusBenchConfig& config, std::size_t measurement, std::size_t agentCount,
                           const BenchEndpoints& endpoints, PauseRun& busRun, PauseRun& rawRun,
                           std::ostream& progress) {
  const std::size_t warmup = warmupFor(config.pauseRounds);
  progress << "pause fan-out, " << agentCount << " agent" << (agentCount == 1 ? "" : "s") << ": starting\n";
  FanoutResult result;
  result.agents = agentCount;

  AgentProcesses agents;
  for (std::size_t i = 0; i < agentCount; ++i) {
    const std::string id = pauseAgentId(measurement, i);
    agents.spawn("agent " + id, agentArgs("agent-pause", id, endpoints));
  }
  const auto joinStart = Clock::now();
  joinAgents(busRun, Path::Bus, agentCount, agents);
  joinAgents(rawRun, Path::Raw, agentCount, agents);
  result.joinMs = static_cast<double>(nanosecondsSince(joinStart)) / 1e6;
  drainAcks(busRun);
  drainAcks(rawRun);
  progress << "  all joined in " << static_cast<long>(result.joinMs) << " ms; " << config.pauseRounds
           << " rounds per path (+" << warmup << " warm-up)\n";

  const std::uint64_t staleBefore = busRun.staleAcks + rawRun.staleAcks;
  std::vector<std::uint64_t> busNs;
  std::vector<std::uint64_t> rawNs;
  busNs.reserve(config.pauseRounds);
  rawNs.reserve(config.pauseRounds);
  for (const Block& block : interleavedSchedule(config.pauseRounds, warmup, config.block)) {
    throwIfInterrupted();
    PauseRun& run = block.path == Path::Bus ? busRun : rawRun;
    std::vector<std::uint64_t>& out = block.path == Path::Bus ? busNs : rawNs;
    for (std::size_t i = 0; i < block.count; ++i) {
      const std::uint64_t elapsed = measurePauseRound(run, block.path, agentCount, agents);
      if (block.measured) out.push_back(elapsed);
    }
  }
  agents.stopAll();
  result.staleAcks = busRun.staleAcks + rawRun.staleAcks - staleBefore;
  result.latency = {summarize(std::move(busNs)), summarize(std::move(rawNs))};
  return result;
}

void addEndpointFiles(RunFiles& runFiles, const BenchEndpoints& endpoints) {
  for (const std::string& endpoint :
       {endpoints.bus.requests, endpoints.bus.events, endpoints.raw.requests, endpoints.raw.events}) {
    runFiles.addEndpoint(endpoint);
  }
}

}  // namespace

LatencyResults runLatencyBenchmarks(const BusBenchConfig& config, std::ostream& progress) {
  const BenchEndpoints endpoints = resolveBenchEndpoints();
  LatencyResults results;
  results.sizes = busMessageSizes();
  results.busEndpoint = endpoints.bus.requests;
  results.rawEndpoint = endpoints.raw.requests;

  RunFiles runFiles;  // removed last, once every socket has closed
  addEndpointFiles(runFiles, endpoints);
  // Declared before the sockets, so that they close before it terminates.
  zmq::context_t context;
  Coordinators coordinators{makeBusCoordinator(context, endpoints.bus), makeRawCoordinator(context, endpoints.raw)};

  results.roundTrip = measureRoundTrip(config, endpoints, coordinators, progress);
  PauseRun busRun{*coordinators.bus};
  PauseRun rawRun{*coordinators.raw};
  for (std::size_t measurement = 0; measurement < config.agentCounts.size(); ++measurement) {
    results.fanout.push_back(
        measureFanout(config, measurement, config.agentCounts[measurement], endpoints, busRun, rawRun, progress));
  }
  return results;
}

LatencyComparison runRoundTripBenchmark(std::size_t roundTrips, std::size_t block, std::ostream& progress) {
  const BenchEndpoints endpoints = resolveBenchEndpoints();
  RunFiles runFiles;  // removed last, once every socket has closed
  addEndpointFiles(runFiles, endpoints);
  zmq::context_t context;  // before the sockets, so that they close before it terminates
  Coordinators coordinators{makeBusCoordinator(context, endpoints.bus), makeRawCoordinator(context, endpoints.raw)};
  BusBenchConfig config;
  config.roundTrips = roundTrips;
  config.block = block;
  return measureRoundTrip(config, endpoints, coordinators, progress);
}

}  // namespace wsync::bench
