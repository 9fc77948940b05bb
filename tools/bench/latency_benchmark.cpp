#include "bus.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <string_view>
#include <utility>

#include <wsync/bus/transport/bus_address.hpp>
#include <zmq.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "latency_paths.hpp"
#include "run_files.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

double microsecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

std::chrono::milliseconds remainingUntil(Clock::time_point deadline) {
  // Rounded up, so that a wait does not end early and spin on 0 ms ("just look"); never negative, which the
  // endpoints would take as "wait forever".
  return std::max(std::chrono::milliseconds{0}, std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Both paths of a run: two bus names unique to it, resolved to ipc:// endpoints in the runtime folder, and the
// coordinator's side of each. The endpoints' files go last, once every socket has closed.
struct LatencyRun {
  LatencyRun() {
    const std::string name = "wsync-bench-" + std::to_string(::getpid());
    busEndpoints = orThrow(bus::resolveEndpoints(name), "endpoints");
    rawEndpoints = orThrow(bus::resolveEndpoints(name + "-raw"), "endpoints");
    for (const auto* endpoints : {&busEndpoints, &rawEndpoints}) {
      files.addEndpoint(endpoints->requests);
      files.addEndpoint(endpoints->events);
    }
    bus = makeBusCoordinator(context, busEndpoints);
    raw = makeRawCoordinator(context, rawEndpoints);
  }
  CoordinatorPath& of(Path path) { return path == Path::Bus ? *bus : *raw; }

  std::vector<std::string> agentArgs(std::string_view role, std::string_view id) const {
    return {std::string(role),      "--id",          std::string(id),        "--bus-requests",
            busEndpoints.requests,  "--bus-events",  busEndpoints.events,    "--raw-requests",
            rawEndpoints.requests,  "--raw-events",  rawEndpoints.events};
  }

  bus::BusEndpoints busEndpoints;
  bus::BusEndpoints rawEndpoints;
  RunFiles files;
  zmq::context_t context;  // before the sockets, so that they close before it terminates
  std::unique_ptr<CoordinatorPath> bus;
  std::unique_ptr<CoordinatorPath> raw;
};

// One line of the round-trip agent's samples, "bus NS NS ..." or "raw ...", in microseconds.
std::vector<double> readSamples(Agents& agents, const std::string& path, std::size_t expected) {
  std::istringstream line(agents.readLine(0, kAgentExitTimeout, "its " + path + " samples"));
  std::string word;
  line >> word;
  std::vector<double> samples;
  for (std::uint64_t ns = 0; line >> ns;) samples.push_back(static_cast<double>(ns) / 1000);
  if (word != path || samples.size() != expected) {
    throw BenchFailure("round trip: the agent sent " + std::to_string(samples.size()) + " samples for '" + word +
                       "', expected " + std::to_string(expected) + " for '" + path + "'");
  }
  return samples;
}

LatencyComparison measureRoundTrip(LatencyRun& run, std::size_t roundTrips, std::size_t block,
                                   std::ostream& progress) {
  const std::size_t warmup = warmupFor(roundTrips);
  progress << "round trip: " << roundTrips << " per path (+" << warmup << " warm-up), blocks of " << block << '\n';
  Agents agents;
  std::vector<std::string> args = run.agentArgs("agent-roundtrip", kRoundTripAgentId);
  args.insert(args.end(), {"--iterations", std::to_string(roundTrips), "--warmup", std::to_string(warmup),
                           "--block", std::to_string(block)});
  agents.start("round-trip agent", args, Agents::Link::Reports);

  // The agent drives and times; the coordinator follows the same schedule, so it knows which socket the next
  // request uses. The first request also waits for the agent process to start.
  auto timeout = kJoinTimeout;
  for (const Block& turn : interleavedSchedule(roundTrips, warmup, block)) {
    throwIfInterrupted();
    for (std::size_t i = 0; i < turn.count; ++i, timeout = kReplyTimeout) {
      if (run.of(turn.path).answerRequest(timeout)) continue;
      agents.throwIfAnyExited();
      throw BenchFailure("round trip: no request on the " + std::string(toString(turn.path)) + " path within " +
                         std::to_string(timeout.count()) + " ms");
    }
  }
  LatencyComparison result{summarize(readSamples(agents, "bus", roundTrips)),
                           summarize(readSamples(agents, "raw", roundTrips))};
  agents.waitForAll(kAgentExitTimeout);
  return result;
}

// One path's state in the fan-out: round numbers only grow, so an ack to an earlier round (a probe) is told apart
// from an ack to the round being timed.
struct PauseRun {
  CoordinatorPath& path;
  std::uint64_t nextRound = 1;
  std::uint64_t staleAcks = 0;
};

// The slow-joiner problem, solved deterministically: PUB drops events for a SUB whose subscription has not arrived
// yet, so probe pauses go out until every agent has acked one on this path. An ack proves both the agent's
// subscription and its DEALER connection. Then the acks to the last probes are let in, so that the first timed
// rounds do not pay for them.
void joinAgents(PauseRun& run, Path path, Agents& agents) {
  std::vector<bool> joined(agents.size(), false);
  std::size_t joinedCount = 0;
  const auto deadline = Clock::now() + kJoinTimeout;
  while (joinedCount < agents.size()) {
    throwIfInterrupted();
    agents.throwIfAnyExited();  // an agent that failed to start is reported now, not at the deadline
    if (Clock::now() > deadline) {
      throw BenchFailure("fan-out: only " + std::to_string(joinedCount) + " of " + std::to_string(agents.size()) +
                         " agents answered a probe on the " + std::string(toString(path)) + " path within " +
                         std::to_string(kJoinTimeout.count()) + " ms");
    }
    run.path.publishPause(run.nextRound++);
    const auto probeEnd = Clock::now() + kProbeInterval;
    while (const auto ack = run.path.receiveAck(remainingUntil(probeEnd))) {
      if (ack->agent >= agents.size()) throw BenchFailure("fan-out: ack from agent " + std::to_string(ack->agent));
      if (!joined[ack->agent]) ++joinedCount;
      joined[ack->agent] = true;
    }
  }
}

void drainAcks(PauseRun& run) {
  const auto deadline = Clock::now() + kJoinTimeout;
  while (Clock::now() < deadline && run.path.receiveAck(kDrainQuiet)) {
  }
}

// Microseconds from just before the Pause is built and published until the N-th verified ack of that round is in.
double measurePauseRound(PauseRun& run, Path path, Agents& agents) {
  const std::uint64_t round = run.nextRound++;
  const auto start = Clock::now();
  run.path.publishPause(round);
  for (std::size_t acks = 0; acks < agents.size();) {
    const auto ack = run.path.receiveAck(kReplyTimeout);
    if (!ack) {
      agents.throwIfAnyExited();
      throw BenchFailure("fan-out: " + std::to_string(acks) + " of " + std::to_string(agents.size()) +
                         " acks to round " + std::to_string(round) + " on the " + std::string(toString(path)) +
                         " path within " + std::to_string(kReplyTimeout.count()) + " ms");
    }
    if (ack->round > round) throw BenchFailure("fan-out: ack to round " + std::to_string(ack->round) + ", never sent");
    if (ack->round == round) ++acks;
    if (ack->round < round) ++run.staleAcks;
  }
  return microsecondsSince(start);
}

FanoutResult measureFanout(const BusBenchConfig& config, std::size_t measurement, LatencyRun& run, PauseRun& busRun,
                           PauseRun& rawRun, std::ostream& progress) {
  FanoutResult result;
  result.agents = config.agentCounts[measurement];
  const std::size_t warmup = warmupFor(config.pauseRounds);
  progress << "pause fan-out, " << result.agents << " agents: starting\n";
  Agents agents;
  for (std::size_t i = 0; i < result.agents; ++i) {
    const std::string id = pauseAgentId(measurement, i);
    agents.start("agent " + id, run.agentArgs("agent-pause", id));
  }
  const auto joinStart = Clock::now();
  joinAgents(busRun, Path::Bus, agents);
  joinAgents(rawRun, Path::Raw, agents);
  result.joinMs = microsecondsSince(joinStart) / 1000;
  drainAcks(busRun);
  drainAcks(rawRun);
  progress << "  all joined in " << static_cast<long>(result.joinMs) << " ms; " << config.pauseRounds
           << " rounds per path (+" << warmup << " warm-up)\n";

  const std::uint64_t staleBefore = busRun.staleAcks + rawRun.staleAcks;
  std::vector<double> busUs;
  std::vector<double> rawUs;
  for (const Block& turn : interleavedSchedule(config.pauseRounds, warmup, config.block)) {
    throwIfInterrupted();
    PauseRun& pauseRun = turn.path == Path::Bus ? busRun : rawRun;
    for (std::size_t i = 0; i < turn.count; ++i) {
      const double elapsed = measurePauseRound(pauseRun, turn.path, agents);
      if (turn.measured) (turn.path == Path::Bus ? busUs : rawUs).push_back(elapsed);
    }
  }
  result.staleAcks = busRun.staleAcks + rawRun.staleAcks - staleBefore;
  result.latency = {summarize(std::move(busUs)), summarize(std::move(rawUs))};
  return result;
}

}  // namespace

Json toJson(const LatencyComparison& comparison) {
  return {{"bus", toJson(comparison.bus, "us")}, {"raw", toJson(comparison.raw, "us")}};
}

LatencyResults runLatencyBenchmarks(const BusBenchConfig& config, std::ostream& progress) {
  LatencyRun run;
  LatencyResults results;
  results.busEndpoint = run.busEndpoints.requests;
  results.rawEndpoint = run.rawEndpoints.requests;
  results.roundTrip = measureRoundTrip(run, config.roundTrips, config.block, progress);
  PauseRun busRun{*run.bus};
  PauseRun rawRun{*run.raw};
  for (std::size_t measurement = 0; measurement < config.agentCounts.size(); ++measurement) {
    results.fanout.push_back(measureFanout(config, measurement, run, busRun, rawRun, progress));
  }
  return results;
}

LatencyComparison runRoundTripBenchmark(std::size_t roundTrips, std::size_t block, std::ostream& progress) {
  LatencyRun run;
  return measureRoundTrip(run, roundTrips, block, progress);
}

}  // namespace wsync::bench
