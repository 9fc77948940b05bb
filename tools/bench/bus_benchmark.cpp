#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <iostream>
#include <set>

#include <wsync/bus/state/control_block.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "bus.hpp"
#include "latency_paths.hpp"

namespace wsync::bench {
namespace {

// Both paths of a run: bus names unique to it, ipc:// endpoints (files removed last), the coordinator's sides.
struct LatencyRun {
  LatencyRun() {
    const std::string name = "wsync-bench-" + std::to_string(::getpid());
    agent.busRequests = (busEndpoints = orThrow(bus::resolveEndpoints(name), "endpoints")).requests;
    agent.busEvents = busEndpoints.events;
    const auto raw = orThrow(bus::resolveEndpoints(name + "-raw"), "endpoints");
    agent.rawRequests = raw.requests;
    agent.rawEvents = raw.events;
    for (const auto& endpoint : {busEndpoints.requests, busEndpoints.events, raw.requests, raw.events}) {
      files.addEndpoint(endpoint);
    }
    paths[0] = makeCoordinatorPath(Path::Bus, context, busEndpoints);
    paths[1] = makeCoordinatorPath(Path::Raw, context, raw);
  }
  CoordinatorPath& of(Path path) { return *paths[path == Path::Bus ? 0 : 1]; }

  bus::BusEndpoints busEndpoints;
  LatencyAgentOptions agent;  // the endpoints every agent gets
  RunFiles files;
  zmq::context_t context;  // before the sockets, so that they close before it terminates
  std::array<std::unique_ptr<CoordinatorPath>, 2> paths;
};

// One path's samples from the round-trip agent's line ({"bus": [NS, ...], "raw": [...]}), in microseconds.
Summary samplesOf(const Json& line, const std::string& path, std::size_t expected) {
  std::vector<double> samples;
  for (const std::uint64_t ns : line.at(path)) samples.push_back(static_cast<double>(ns) / 1000);
  if (samples.size() != expected) {
    throw BenchFailure("round trip: the agent sent " + std::to_string(samples.size()) + " " + path +
                       " samples, expected " + std::to_string(expected));
  }
  return summarize(std::move(samples));
}

LatencyComparison measureRoundTrip(LatencyRun& run, std::size_t roundTrips, std::size_t block,
                                   std::ostream& progress) {
  const std::size_t warmup = warmupFor(roundTrips);
  progress << "round trip: " << roundTrips << " per path (+" << warmup << " warm-up), blocks of " << block << '\n';
  LatencyAgentOptions options = run.agent;
  options.id = kRoundTripAgentId;
  options.iterations = roundTrips;
  options.warmup = warmup;
  options.block = block;
  Agents agents;
  agents.start("round-trip agent", "agent-roundtrip", options, true);
  // The agent drives and times on the same schedule; the first request also waits for the agent to start.
  auto timeout = kJoinTimeout;
  for (const Block& turn : interleavedSchedule(roundTrips, warmup, block)) {
    throwIfInterrupted();
    for (std::size_t i = 0; i < turn.count; ++i, timeout = kReplyTimeout) {
      if (run.of(turn.path).answerRequest(timeout)) continue;
      agents.throwIfAnyExited();
      throw BenchFailure("round trip: no request on the " + toString(turn.path) + " path within " +
                         std::to_string(timeout.count()) + " ms");
    }
  }
  const Json samples = Json::parse(agents.readLine(0, kAgentExitTimeout, "its samples"));
  LatencyComparison result{samplesOf(samples, "bus", roundTrips), samplesOf(samples, "raw", roundTrips)};
  agents.waitForAll(kAgentExitTimeout);
  return result;
}

// One path's fan-out state: rounds only grow, so an ack to a probe is told from one to the round being timed.
struct PauseRun {
  CoordinatorPath& path;
  std::uint64_t nextRound = 1;
  std::uint64_t staleAcks = 0;
};

// Slow joiners: PUB drops events for a SUB not yet subscribed, so probes go out until every agent acked one on this
// path (proving its SUB and DEALER); then late acks to probes are drained, so that timed rounds do not pay them.
void joinAgents(PauseRun& run, Path path, Agents& agents) {
  std::set<std::size_t> joined;
  const auto deadline = Clock::now() + kJoinTimeout;
  while (joined.size() < agents.size()) {
    throwIfInterrupted();
    agents.throwIfAnyExited();  // an agent that failed to start is reported now, not at the deadline
    if (Clock::now() > deadline) {
      throw BenchFailure("fan-out: only " + std::to_string(joined.size()) + " of " + std::to_string(agents.size()) +
                         " agents answered a probe on the " + toString(path) + " path within " +
                         std::to_string(kJoinTimeout.count()) + " ms");
    }
    run.path.publishPause(run.nextRound++);
    const auto probeEnd = Clock::now() + kProbeInterval;
    // Rounded up, so that a wait does not end early and spin on 0 ms ("just look").
    while (const auto ack = run.path.receiveAck(std::max(
               std::chrono::milliseconds{0}, std::chrono::ceil<std::chrono::milliseconds>(probeEnd - Clock::now())))) {
      if (ack->agent >= agents.size()) throw BenchFailure("fan-out: ack from agent " + std::to_string(ack->agent));
      joined.insert(ack->agent);
    }
  }
  const auto drainEnd = Clock::now() + kJoinTimeout;
  while (Clock::now() < drainEnd && run.path.receiveAck(kDrainQuiet)) {
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
                         " acks to round " + std::to_string(round) + " on the " + toString(path) + " path within " +
                         std::to_string(kReplyTimeout.count()) + " ms");
    }
    if (ack->round > round) throw BenchFailure("fan-out: ack to round " + std::to_string(ack->round) + ", never sent");
    if (ack->round == round) ++acks;
    if (ack->round < round) ++run.staleAcks;
  }
  return microseconds(Clock::now() - start);
}

struct FanoutResult {
  std::size_t agents = 0;
  LatencyComparison latency{};
  double joinMs = 0;            // until every agent's SUB had delivered a probe, on both paths
  std::uint64_t staleAcks = 0;  // acks to earlier rounds seen while measuring (expected 0 after the drain)
};

FanoutResult measureFanout(const BusBenchConfig& config, std::size_t measurement, LatencyRun& run,
                           std::array<PauseRun, 2>& runs, std::ostream& progress) {
  FanoutResult result{.agents = config.agentCounts[measurement]};
  const std::size_t warmup = warmupFor(config.pauseRounds);
  progress << "pause fan-out, " << result.agents << " agents: starting\n";
  Agents agents;
  for (std::size_t i = 0; i < result.agents; ++i) {
    LatencyAgentOptions options = run.agent;
    options.id = pauseAgentId(measurement, i);
    agents.start("agent " + options.id, "agent-pause", options);
  }
  const auto joinStart = Clock::now();
  joinAgents(runs[0], Path::Bus, agents);
  joinAgents(runs[1], Path::Raw, agents);
  result.joinMs = microseconds(Clock::now() - joinStart) / 1000;
  progress << "  all joined in " << static_cast<long>(result.joinMs) << " ms; " << config.pauseRounds
           << " rounds per path (+" << warmup << " warm-up)\n";
  const std::uint64_t staleBefore = runs[0].staleAcks + runs[1].staleAcks;
  std::vector<double> busUs;
  std::vector<double> rawUs;
  for (const Block& turn : interleavedSchedule(config.pauseRounds, warmup, config.block)) {
    throwIfInterrupted();
    for (std::size_t i = 0; i < turn.count; ++i) {
      const double elapsed = measurePauseRound(runs[turn.path == Path::Bus ? 0 : 1], turn.path, agents);
      if (turn.measured) (turn.path == Path::Bus ? busUs : rawUs).push_back(elapsed);
    }
  }
  result.staleAcks = runs[0].staleAcks + runs[1].staleAcks - staleBefore;
  result.latency = {summarize(std::move(busUs)), summarize(std::move(rawUs))};
  return result;
}

template <typename Body>
int servingBothPaths(const LatencyAgentOptions& options, bool subscribe, Body&& body) {
  zmq::context_t context;
  auto bus = makeAgentPath(Path::Bus, context, {options.busRequests, options.busEvents}, options.id, subscribe);
  auto raw = makeAgentPath(Path::Raw, context, {options.rawRequests, options.rawEvents}, options.id, subscribe);
  body(*bus, *raw);
  return 0;
}

// `value` used and memory clobbered: the read is neither dropped nor hoisted out of the loop; no instruction.
inline void keep(std::uint64_t value) { asm volatile("" : : "r"(value) : "memory"); }

template <typename Read>
double nanosecondsPerRead(Read&& read, std::uint64_t reads) {
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < reads; ++i) keep(read());
  const std::chrono::duration<double, std::nano> elapsed = Clock::now() - start;
  return elapsed.count() / static_cast<double>(reads);
}

// ControlBlockView::appliedVersion(slot), against std::atomic<uint64_t>::load(acquire) in process memory: per read of
// each after a warm-up, the two alternating, the order flipping every repetition.
std::pair<Summary, Summary> measureVersionReads(const BusBenchConfig& config, std::ostream& progress) {
  progress << "version read: " << config.versionRepetitions << " x " << config.versionReads << " reads per kind\n";
  const std::string busName = "wsync-bench-" + std::to_string(::getpid()) + "-cb";
  const std::string agentId = "version-reader";
  // The coordinator creates the block, the agent attaches to its slot; a read-only mapping reads, as an engine would.
  auto owner = orThrow(bus::ControlBlockOwner::create(busName), "control block");
  const std::optional<std::uint32_t> maybeSlot = owner.findFreeSlot();
  if (!maybeSlot) throw BenchFailure("control block: no free slot");
  const std::uint32_t slot = *maybeSlot;
  orThrow(owner.assignSlot(slot, {agentId, msg::Role::Worker, 0, static_cast<std::uint32_t>(::getpid())}),
          "control block");
  auto writer = orThrow(bus::AgentSlotWriter::attach(busName, slot, agentId, 1), "control block");
  const auto view = orThrow(bus::ControlBlockView::open(busName), "control block");
  // The process-local baseline, on a cache line of its own like the slot's field.
  struct alignas(64) LocalVersion {
    std::atomic<std::uint64_t> value{1};
  };
  const auto local = std::make_unique<LocalVersion>();
  const auto busRead = [&view, slot] { return view.appliedVersion(slot); };
  const auto localRead = [&local] { return local->value.load(std::memory_order_acquire); };
  std::vector<double> busNs;
  std::vector<double> localNs;
  (void)nanosecondsPerRead(busRead, config.versionReads / 10);
  (void)nanosecondsPerRead(localRead, config.versionReads / 10);
  for (std::size_t rep = 0; rep < config.versionRepetitions; ++rep) {
    throwIfInterrupted();
    if (rep % 2 == 1) localNs.push_back(nanosecondsPerRead(localRead, config.versionReads));
    busNs.push_back(nanosecondsPerRead(busRead, config.versionReads));
    if (rep % 2 == 0) localNs.push_back(nanosecondsPerRead(localRead, config.versionReads));
  }
  return {summarize(std::move(busNs)), summarize(std::move(localNs))};
}

}  // namespace

int runRoundTripAgent(const LatencyAgentOptions& options) {
  return servingBothPaths(options, false, [&](AgentPath& busPath, AgentPath& rawPath) {
    std::array<std::vector<std::uint64_t>, 2> samples;  // bus, raw
    for (auto& path : samples) path.reserve(options.iterations);
    std::uint64_t seq = 0;
    for (const Block& block : interleavedSchedule(options.iterations, options.warmup, options.block)) {
      AgentPath& path = block.path == Path::Bus ? busPath : rawPath;
      for (std::size_t i = 0; i < block.count; ++i) {
        const auto start = Clock::now();
        path.roundTrip(++seq);
        const auto elapsed = std::chrono::nanoseconds(Clock::now() - start).count();
        if (block.measured) samples[block.path == Path::Bus ? 0 : 1].push_back(static_cast<std::uint64_t>(elapsed));
      }
    }
    // On the pipe, which the benchmark reads once it has answered the last request.
    std::cout << Json{{"bus", samples[0]}, {"raw", samples[1]}}.dump() << std::endl;
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

LatencyComparison runRoundTripBenchmark(std::size_t roundTrips, std::size_t block, std::ostream& progress) {
  LatencyRun run;
  return measureRoundTrip(run, roundTrips, block, progress);
}

std::vector<Table::Column> latencyColumns(Table::Column first) {
  return {std::move(first),          {"bus_p50_us", "bus p50"}, {"raw_p50_us", "raw p50"},
          {"p50_ratio", "bus/raw p50"}, {"bus_p90_us", "bus p90"}, {"raw_p90_us", "raw p90"},
          {"bus_p99_us", "bus p99"}, {"raw_p99_us", "raw p99"}, {"samples", "samples per path"}};
}

std::vector<Cell> latencyRow(Cell first, const LatencyComparison& l) {
  const auto cell = [](double value) { return Cell(value, fixed(value, value < 100 ? 1 : 0)); };
  return {std::move(first), cell(l.bus.p50), cell(l.raw.p50), ratio(l.p50Ratio()), cell(l.bus.p90),
          cell(l.raw.p90),  cell(l.bus.p99), cell(l.raw.p99), l.bus.samples};
}

void runBusBenchmark(const BusBenchConfig& c, Report& report) {
  const auto [shared, local] = measureVersionReads(c, std::cerr);
  LatencyRun run;
  const LatencyComparison roundTrip = measureRoundTrip(run, c.roundTrips, c.block, std::cerr);
  std::array<PauseRun, 2> runs{PauseRun{run.of(Path::Bus)}, PauseRun{run.of(Path::Raw)}};
  std::vector<FanoutResult> fanout;
  for (std::size_t i = 0; i < c.agentCounts.size(); ++i) fanout.push_back(measureFanout(c, i, run, runs, std::cerr));

  const MessageSizes s = busMessageSizes();
  report.parameters().update(Json{{"round_trips", c.roundTrips}, {"pause_rounds", c.pauseRounds},
                                  {"warmup", "a tenth more per path, at least 10"}, {"block", c.block},
                                  {"agents", c.agentCounts}, {"version_reads", c.versionReads},
                                  {"version_repetitions", c.versionRepetitions},
                                  {"endpoint", run.busEndpoints.requests},
                                  {"message_bytes", {{"snapshot_request", s.request}, {"snapshot_reply", s.reply},
                                                     {"pause", s.pause}, {"pause_ack", s.pauseAck}}}});
  auto columns = latencyColumns({"measurement", ""});
  columns.insert(columns.end(), {{"goal_met", "goal (p50 within " + fixed(kMaxBusToRawRatio, 1) + "x)"},
                                 {"join_ms", "join ms"}, {"stale_acks", "late acks while timing"}});
  Table latency(columns);
  auto row = latencyRow("request/reply round trip", roundTrip);
  row.push_back(verdict(roundTrip.p50Ratio() <= kMaxBusToRawRatio));
  latency.row(std::move(row));
  for (const FanoutResult& f : fanout) {
    row = latencyRow(Cell(Json(f.agents), "pause, N = " + std::to_string(f.agents)), f.latency);
    row.insert(row.end(), {verdict(f.latency.p50Ratio() <= kMaxBusToRawRatio), number(f.joinMs, 0), f.staleAcks});
    latency.row(std::move(row));
  }
  report.section("latency", "Control plane, bus library vs raw ZeroMQ (microseconds)",
                 "Round trip: an agent process sends a SnapshotRequest over its DEALER, the coordinator's ROUTER "
                 "verifies it and answers a SnapshotReply, which the agent verifies; timed by the agent. Pause: the "
                 "coordinator publishes a Pause, N agent processes each answer a PauseAck; timed until the N-th is in "
                 "and verified. Raw: frames of the same sizes through cppzmq, neither encoded nor verified.",
                 latency);

  Table reads({{"read", ""}, {"shared", "bus (shared memory) ns"}, {"local", "process-local atomic ns"},
               {"ratio", "bus/local"}, {"goal_met", "goal (bus under " + fixed(kMaxVersionReadNs, 0) + " ns)"}});
  const auto cost = [](const Summary& read) {
    return Cell(Json{{"median_ns", read.median}, {"min_ns", read.min}},
                fixed(read.median, 2) + " (min " + fixed(read.min, 2) + ")");
  };
  reads.row({"applied version", cost(shared), cost(local), ratio(local.median > 0 ? shared.median / local.median : 0),
             verdict(shared.median < kMaxVersionReadNs)});
  report.section("version_read", "Applied-version read (nanoseconds per read, median of the repetitions)",
                 "`ControlBlockView::appliedVersion(slot)` on a mapping of the control block, against "
                 "`std::atomic<uint64_t>::load(acquire)` in process memory; per read, loop included.",
                 reads);
}

}  // namespace wsync::bench
