#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <iostream>
#include <set>

#include <wsync/bus/state/control_block.hpp>
#include <wsync/bus/transport/zap_authenticator.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "bus.hpp"
#include "latency_paths.hpp"
#include "machine_load.hpp"
#include "network_interface.hpp"

namespace wsync::bench {
namespace {

// The endpoints of path number `index` on tcp://HOST:PORT: two ports each, from PORT up.
bus::BusEndpoints tcpEndpoints(const std::string& transport, std::size_t index) {
  const std::size_t colon = transport.rfind(':');
  unsigned port = 0;
  const char* end = transport.data() + transport.size();
  if (colon == std::string::npos || std::from_chars(transport.data() + colon + 1, end, port).ptr != end) {
    throw BenchFailure("--transport '" + transport + "': use ipc or tcp://ADDRESS:PORT");
  }
  const std::string shifted = transport.substr(0, colon + 1) + std::to_string(port + 2 * index);
  return orThrow(bus::resolveEndpoints("wsync-bench", shifted), "--transport");
}

// Every path of a run: its endpoints (ipc: bus names unique to the run, files removed last; tcp: ports from the given
// one), its security, the coordinator's sides.
struct LatencyRun {
  explicit LatencyRun(const BusNetwork& network = {}) {
    const std::size_t count = network.curve ? 3 : 2;
    if (network.tcp()) {
      for (std::size_t p = 0; p < count; ++p) endpoints.push_back(tcpEndpoints(network.transport, p));
    } else {
      const std::string name = "wsync-bench-" + std::to_string(::getpid());
      endpoints = {orThrow(bus::resolveEndpoints(name), "endpoints"),
                   orThrow(bus::resolveEndpoints(name + "-raw"), "endpoints")};
    }
    std::optional<bus::CurveKeyPair> serverKeys;
    if (network.curve) {
      serverKeys = orThrow(bus::generateCurveKeyPair(), "CURVE keys");
      const bus::CurveKeyPair agentKeys = orThrow(bus::generateCurveKeyPair(), "CURVE keys");
      agent.serverKey = serverKeys->publicKey;
      agent.publicKey = agentKeys.publicKey;
      agent.secretKey = agentKeys.secretKey;
      // Admits the agents' key, as a coordinator's --allow-keys would; asked once per connection, never per message.
      zap = orThrow(bus::ZapAuthenticator::start(context, {agentKeys.publicKey}), "ZAP handler");
    }
    for (std::size_t p = 0; p < count; ++p) {
      agent.requests.push_back(endpoints[p].requests);
      agent.events.push_back(endpoints[p].events);
      files.addEndpoint(endpoints[p].requests);
      files.addEndpoint(endpoints[p].events);
      paths.push_back(makeCoordinatorPath(kPaths[p], context, endpoints[p],
                                          kPaths[p] == Path::RawPlain ? std::nullopt : serverKeys));
    }
  }
  std::size_t pathCount() const { return paths.size(); }
  CoordinatorPath& of(Path path) { return *paths.at(indexOf(path)); }

  std::vector<bus::BusEndpoints> endpoints;  // per path, in the order of kPaths
  LatencyAgentOptions agent;                 // the endpoints and keys every agent gets
  RunFiles files;
  zmq::context_t context;                      // before the sockets, so that they close before it terminates
  std::unique_ptr<bus::ZapAuthenticator> zap;  // before the sockets it admits to, gone before the context
  std::vector<std::unique_ptr<CoordinatorPath>> paths;
};

std::string pathNames(std::size_t count) {
  std::string names;
  for (std::size_t p = 0; p < count; ++p) names += (p == 0 ? "" : ", ") + toString(kPaths[p]);
  return names;
}

// One path's samples from the round-trip agent's line ({"bus": [NS, ...], "raw": [...], ...}), in microseconds.
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
                                   const AgentPlacement& placement, std::ostream& progress) {
  const std::size_t warmup = warmupFor(roundTrips);
  progress << "round trip: " << roundTrips << " per path (+" << warmup << " warm-up), blocks of " << block << "; paths "
           << pathNames(run.pathCount()) << '\n';
  LatencyAgentOptions options = run.agent;
  options.id = kRoundTripAgentId;
  options.iterations = roundTrips;
  options.warmup = warmup;
  options.block = block;
  Agents agents(placement);
  agents.start("round-trip agent", "agent-roundtrip", options, true);
  // The agent drives and times on the same schedule; the first request also waits for the agent to start.
  auto timeout = kJoinTimeout;
  for (const Block& turn : interleavedSchedule(roundTrips, warmup, block, run.pathCount())) {
    throwIfInterrupted();
    for (std::size_t i = 0; i < turn.count; ++i, timeout = kReplyTimeout) {
      if (run.of(turn.path).answerRequest(timeout)) continue;
      agents.throwIfAnyExited();
      throw BenchFailure("round trip: no request on the " + toString(turn.path) + " path within " +
                         std::to_string(timeout.count()) + " ms");
    }
  }
  const Json samples = Json::parse(agents.readLine(0, kAgentExitTimeout, "its samples"));
  LatencyComparison result;
  result.bus = samplesOf(samples, toString(Path::Bus), roundTrips);
  result.raw = samplesOf(samples, toString(Path::Raw), roundTrips);
  if (run.pathCount() > indexOf(Path::RawPlain)) {
    result.rawPlain = samplesOf(samples, toString(Path::RawPlain), roundTrips);
  }
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
  while (Clock::now() < drainEnd && run.path.receiveAck(kDrainQuiet)) {}
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
  std::string hosts;  // how many agents ran on which host, when on others
  LatencyComparison latency{};
  double joinMs = 0;            // until every agent's SUB had delivered a probe, on both paths
  std::uint64_t staleAcks = 0;  // acks to earlier rounds seen while measuring (expected 0 after the drain)
};

std::uint64_t staleAcksOf(const std::vector<PauseRun>& runs) {
  std::uint64_t stale = 0;
  for (const PauseRun& run : runs) stale += run.staleAcks;
  return stale;
}

// "w1 3, w2 3, w3 2": how many of `count` agents the placement puts on each host.
std::string agentsPerHost(const AgentPlacement& placement, std::size_t count) {
  std::string text;
  for (std::size_t h = 0; h < placement.hosts.size() && h < count; ++h) {
    const std::size_t here = count / placement.hosts.size() + (h < count % placement.hosts.size() ? 1 : 0);
    text += (text.empty() ? "" : ", ") + placement.hosts[h] + " " + std::to_string(here);
  }
  return text;
}

FanoutResult measureFanout(const BusBenchConfig& config, std::size_t measurement, LatencyRun& run,
                           std::vector<PauseRun>& runs, const AgentPlacement& placement, std::ostream& progress) {
  FanoutResult result;
  result.agents = config.agentCounts[measurement];
  const std::size_t warmup = warmupFor(config.pauseRounds);
  if (placement.remote()) result.hosts = agentsPerHost(placement, result.agents);
  progress << "pause fan-out, " << result.agents << " agents" << (placement.remote() ? " (" + result.hosts + ")" : "")
           << ": starting\n";
  Agents agents(placement);
  for (std::size_t i = 0; i < result.agents; ++i) {
    LatencyAgentOptions options = run.agent;
    options.id = pauseAgentId(measurement, i);
    agents.start("agent " + options.id, "agent-pause", options);
  }
  const auto joinStart = Clock::now();
  for (std::size_t p = 0; p < runs.size(); ++p) joinAgents(runs[p], kPaths[p], agents);
  result.joinMs = microseconds(Clock::now() - joinStart) / 1000;
  progress << "  all joined in " << static_cast<long>(result.joinMs) << " ms; " << config.pauseRounds
           << " rounds per path (+" << warmup << " warm-up)\n";
  const std::uint64_t staleBefore = staleAcksOf(runs);
  std::vector<std::vector<double>> elapsedUs(runs.size());
  for (const Block& turn : interleavedSchedule(config.pauseRounds, warmup, config.block, runs.size())) {
    throwIfInterrupted();
    for (std::size_t i = 0; i < turn.count; ++i) {
      const double elapsed = measurePauseRound(runs[indexOf(turn.path)], turn.path, agents);
      if (turn.measured) elapsedUs[indexOf(turn.path)].push_back(elapsed);
    }
  }
  result.staleAcks = staleAcksOf(runs) - staleBefore;
  result.latency.bus = summarize(std::move(elapsedUs[indexOf(Path::Bus)]));
  result.latency.raw = summarize(std::move(elapsedUs[indexOf(Path::Raw)]));
  if (runs.size() > indexOf(Path::RawPlain)) {
    result.latency.rawPlain = summarize(std::move(elapsedUs[indexOf(Path::RawPlain)]));
  }
  return result;
}

// An agent's side of every path of the run, in the order of kPaths; CURVE on all but raw plain when keys are given.
template <typename Body>
int servingAllPaths(const LatencyAgentOptions& options, bool subscribe, Body&& body) {
  if (options.requests.size() < 2 || options.requests.size() > kPaths.size() ||
      options.events.size() != options.requests.size()) {
    throw BenchFailure("agent options: " + std::to_string(options.requests.size()) + " request and " +
                       std::to_string(options.events.size()) + " event endpoints");
  }
  std::optional<bus::CurveClient> curve;
  if (!options.serverKey.empty()) curve = bus::CurveClient{{options.publicKey, options.secretKey}, options.serverKey};
  zmq::context_t context;
  std::vector<std::unique_ptr<AgentPath>> paths;
  for (std::size_t p = 0; p < options.requests.size(); ++p) {
    paths.push_back(makeAgentPath(kPaths[p], context, {options.requests[p], options.events[p]}, options.id, subscribe,
                                  kPaths[p] == Path::RawPlain ? std::nullopt : curve));
  }
  body(paths);
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
  return servingAllPaths(options, false, [&](std::vector<std::unique_ptr<AgentPath>>& paths) {
    std::vector<std::vector<std::uint64_t>> samples(paths.size());  // per path
    for (auto& path : samples) path.reserve(options.iterations);
    std::uint64_t seq = 0;
    for (const Block& block : interleavedSchedule(options.iterations, options.warmup, options.block, paths.size())) {
      AgentPath& path = *paths[indexOf(block.path)];
      for (std::size_t i = 0; i < block.count; ++i) {
        const auto start = Clock::now();
        path.roundTrip(++seq);
        const auto elapsed = std::chrono::nanoseconds(Clock::now() - start).count();
        if (block.measured) samples[indexOf(block.path)].push_back(static_cast<std::uint64_t>(elapsed));
      }
    }
    Json line = Json::object();
    for (std::size_t p = 0; p < paths.size(); ++p) line[toString(kPaths[p])] = samples[p];
    // On the pipe, which the benchmark reads once it has answered the last request.
    std::cout << line.dump() << std::endl;
  });
}

int runPauseAgent(const LatencyAgentOptions& options) {
  return servingAllPaths(options, true, [](std::vector<std::unique_ptr<AgentPath>>& paths) {
    // One poll over every SUB socket: the agent waits the same way whichever path the next pause comes on.
    std::vector<zmq::pollitem_t> items;
    for (const auto& path : paths) items.push_back({path->eventSocket().handle(), 0, ZMQ_POLLIN, 0});
    for (;;) {
      if (zmq::poll(items.data(), items.size(), kAgentIdleTimeout) == 0) {
        throw BenchFailure("no pause for " + std::to_string(kAgentIdleTimeout.count()) +
                           " ms: the benchmark is gone or stuck");
      }
      for (std::size_t p = 0; p < paths.size(); ++p) {
        if ((items[p].revents & ZMQ_POLLIN) != 0) paths[p]->answerPendingPauses();
      }
    }
  });
}

LatencyComparison runRoundTripBenchmark(std::size_t roundTrips, std::size_t block, std::ostream& progress) {
  LatencyRun run;
  return measureRoundTrip(run, roundTrips, block, {}, progress);
}

std::vector<Table::Column> latencyColumns(Table::Column first, bool rawPlain) {
  if (!rawPlain) {
    return {std::move(first),
            {"bus_p50_us", "bus p50"},
            {"raw_p50_us", "raw p50"},
            {"p50_ratio", "bus/raw p50"},
            {"bus_p90_us", "bus p90"},
            {"raw_p90_us", "raw p90"},
            {"bus_p99_us", "bus p99"},
            {"raw_p99_us", "raw p99"},
            {"samples", "samples per path"}};
  }
  return {std::move(first),
          {"bus_p50_us", "bus p50"},
          {"raw_p50_us", "raw CURVE p50"},
          {"p50_ratio", "bus/raw CURVE p50"},
          {"raw_plain_p50_us", "raw plain p50"},
          {"plain_p50_ratio", "bus/raw plain p50"},
          {"bus_p90_us", "bus p90"},
          {"raw_p90_us", "raw CURVE p90"},
          {"raw_plain_p90_us", "raw plain p90"},
          {"bus_p99_us", "bus p99"},
          {"raw_p99_us", "raw CURVE p99"},
          {"raw_plain_p99_us", "raw plain p99"},
          {"samples", "samples per path"}};
}

std::vector<Cell> latencyRow(Cell first, const LatencyComparison& l) {
  const auto cell = [](double value) { return Cell(value, fixed(value, value < 100 ? 1 : 0)); };
  if (!l.rawPlain) {
    return {std::move(first), cell(l.bus.p50), cell(l.raw.p50), ratio(l.p50Ratio()), cell(l.bus.p90),
            cell(l.raw.p90),  cell(l.bus.p99), cell(l.raw.p99), l.bus.samples};
  }
  const Summary& plain = *l.rawPlain;
  return {std::move(first),         cell(l.bus.p50), cell(l.raw.p50), ratio(l.p50Ratio()), cell(plain.p50),
          ratio(l.plainP50Ratio()), cell(l.bus.p90), cell(l.raw.p90), cell(plain.p90),     cell(l.bus.p99),
          cell(l.raw.p99),          cell(plain.p99), l.bus.samples};
}

namespace {

AgentPlacement placementOf(const BusNetwork& network) {
  if (network.agentHosts.empty()) return {};
  return AgentPlacement::across(network.agentHosts, network.spawnVia);
}

std::string thisHostname() {
  std::array<char, 256> name{};
  return ::gethostname(name.data(), name.size() - 1) == 0 ? std::string(name.data()) : "unknown";
}

// The facts of a run on tcp for the report: where each side ran, over what, with what security.
Json networkParameters(const BusNetwork& network, const bus::BusEndpoints& endpoints) {
  const std::string address = endpoints.requests.substr(6, endpoints.requests.rfind(':') - 6);  // after tcp://
  return {{"transport", "tcp"},
          {"curve", network.curve},
          {"baselines", network.curve ? "raw: cppzmq over tcp with CURVE (the goal's baseline); raw plain: cppzmq "
                                        "over plain tcp (what CURVE costs)"
                                      : "raw: cppzmq over plain tcp"},
          {"bench_host", thisHostname()},
          {"agent_hosts", network.agentHosts.empty() ? Json::array({thisHostname()}) : Json(network.agentHosts)},
          {"link", network.link.empty() ? "not described (--link)" : network.link},
          {"interface", describeInterfaceOf(address)}};
}

}  // namespace

void runBusBenchmark(const BusBenchConfig& c, Report& report) {
  const AgentPlacement placement = placementOf(c.network);
  const auto [shared, local] = measureVersionReads(c, std::cerr);
  const MachineLoad load;  // from here: the latency measurements, whose agents are reaped children by the end
  LatencyRun run(c.network);
  const LatencyComparison roundTrip = measureRoundTrip(run, c.roundTrips, c.block, placement, std::cerr);
  std::vector<PauseRun> runs;
  for (std::size_t p = 0; p < run.pathCount(); ++p) runs.push_back(PauseRun{run.of(kPaths[p])});
  std::vector<FanoutResult> fanout;
  for (std::size_t i = 0; i < c.agentCounts.size(); ++i) {
    fanout.push_back(measureFanout(c, i, run, runs, placement, std::cerr));
  }

  const MessageSizes s = busMessageSizes();
  report.parameters().update(Json{
      {"round_trips", c.roundTrips},
      {"pause_rounds", c.pauseRounds},
      {"warmup", "a tenth more per path, at least 10"},
      {"block", c.block},
      {"agents", c.agentCounts},
      {"version_reads", c.versionReads},
      {"version_repetitions", c.versionRepetitions},
      {"endpoint", run.endpoints.front().requests},
      {"message_bytes",
       {{"snapshot_request", s.request}, {"snapshot_reply", s.reply}, {"pause", s.pause}, {"pause_ack", s.pauseAck}}}});
  const double othersShare = load.othersShare();
  if (c.network.tcp()) {
    report.parameters().update(networkParameters(c.network, run.endpoints.front()));
    report.json["others_cpu_share"] = othersShare;
  }
  const bool rawPlain = run.pathCount() > indexOf(Path::RawPlain);
  auto columns = latencyColumns({"measurement", ""}, rawPlain);
  columns.insert(columns.end(), {{"goal_met", "goal (p50 within " + fixed(kMaxBusToRawRatio, 1) + "x" +
                                                  (rawPlain ? " of raw CURVE)" : ")")},
                                 {"join_ms", "join ms"},
                                 {"stale_acks", "late acks while timing"}});
  if (placement.remote()) columns.push_back({"agent_hosts", "agents on"});
  Table latency(columns);
  auto row = latencyRow("request/reply round trip", roundTrip);
  row.push_back(verdict(roundTrip.p50Ratio() <= kMaxBusToRawRatio));
  if (placement.remote()) row.insert(row.end(), {Cell(), Cell(), agentsPerHost(placement, 1)});
  latency.row(std::move(row));
  for (const FanoutResult& f : fanout) {
    row = latencyRow(Cell(Json(f.agents), "pause, N = " + std::to_string(f.agents)), f.latency);
    row.insert(row.end(), {verdict(f.latency.p50Ratio() <= kMaxBusToRawRatio), number(f.joinMs, 0), f.staleAcks});
    if (placement.remote()) row.push_back(f.hosts);
    latency.row(std::move(row));
  }
  std::string where;
  if (c.network.tcp()) {
    where =
        " Every path over tcp between the benchmark's host and its agents' (Parameters: bench_host, agent_hosts, "
        "link)" +
        std::string(rawPlain ? "; bus and raw with CURVE (the goal compares these two), raw plain without it."
                             : ", without CURVE.") +
        " Other processes used " + percent(othersShare).text + " of the CPUs meanwhile.";
  }
  report.section("latency", "Control plane, bus library vs raw ZeroMQ (microseconds)",
                 "Round trip: an agent process sends a SnapshotRequest over its DEALER, the coordinator's ROUTER "
                 "verifies it and answers a SnapshotReply, which the agent verifies; timed by the agent. Pause: the "
                 "coordinator publishes a Pause, N agent processes each answer a PauseAck; timed until the N-th is in "
                 "and verified. Raw: frames of the same sizes through cppzmq, neither encoded nor verified." +
                     where,
                 latency);

  Table reads({{"read", ""},
               {"shared", "bus (shared memory) ns"},
               {"local", "process-local atomic ns"},
               {"ratio", "bus/local"},
               {"goal_met", "goal (bus under " + fixed(kMaxVersionReadNs, 0) + " ns)"}});
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
