#pragma once
// `wsync-bench bus`: the control plane through the bus library against raw ZeroMQ, and the applied-version read.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// Microseconds when idle; room for a loaded 2-core machine starting 32 agents.
inline constexpr std::chrono::milliseconds kReplyTimeout{5000};
// Starting N agents and subscribing every SUB socket: seconds for 32 agents on 2 cores.
inline constexpr std::chrono::milliseconds kJoinTimeout{30000};
// Probes while agents join: often enough to join quickly, rarely enough not to flood.
inline constexpr std::chrono::milliseconds kProbeInterval{20};
// Acks to earlier probes may still arrive after joining: the path is clean after this much silence.
inline constexpr std::chrono::milliseconds kDrainQuiet{100};
inline constexpr std::size_t kDefaultBlock = 50;
// Keeps routing ids and process counts sane; the bus itself caps agents at kMaxAgents slots.
inline constexpr std::size_t kMaxBenchAgents = 128;
// The goals (issue): bus p50 within 1.3x of raw ZeroMQ; version read under 20 ns.
inline constexpr double kMaxBusToRawRatio = 1.3;
inline constexpr double kMaxVersionReadNs = 20.0;

// Where the measurement runs (README, "`bus` across hosts"): the benchmark binds its paths on `transport`; its
// agents run here or, through a launcher, on other hosts.
struct BusNetwork {
  // "ipc", or tcp://ADDRESS:PORT: the bus path on PORT and PORT+1, raw on PORT+2 and PORT+3, raw plain on PORT+4
  // and PORT+5; ADDRESS is bound and what the agents connect to.
  std::string transport = "ipc";
  // tcp only: the bus and raw paths use CURVE (throwaway keys of the run, a ZAP handler admitting the agents' key);
  // a third path, raw over plain tcp, shows what CURVE itself costs.
  bool curve = false;
  std::vector<std::string> agentHosts;  // round-robin; empty: agents on this host
  std::string spawnVia;                 // the launcher's words, separated by spaces; "{host}" becomes the host
  std::string link;                     // what joins the hosts, for the report
  bool tcp() const { return transport != "ipc"; }
};

struct BusBenchConfig {
  ModeOptions mode;
  BusNetwork network;
  std::size_t roundTrips = 20000;
  std::size_t pauseRounds = 2000;  // per agent count
  std::size_t block = kDefaultBlock;
  std::vector<std::size_t> agentCounts{1, 8, 32};
  std::uint64_t versionReads = 20'000'000;  // per timed repetition
  std::size_t versionRepetitions = 11;
  void quick() {
    roundTrips = 1000;
    pauseRounds = 100;
    versionReads = 2'000'000;
    versionRepetitions = 5;
  }
};

// Unmeasured iterations on each path before the first measured block: connections, allocator, caches.
inline std::size_t warmupFor(std::size_t iterations) { return iterations / 10 < 10 ? 10 : iterations / 10; }

// The agents (agent-roundtrip, agent-pause) each serve every path: one scheduling history for all sides.
struct LatencyAgentOptions {
  std::string id;                             // routing id, the same on every path
  std::vector<std::string> requests, events;  // per path, in the order of kPaths: bus, raw[, raw plain]
  // CURVE on the bus and raw paths when the server key is set: the run's throwaway keys (they protect nothing else).
  std::string serverKey, publicKey, secretKey;
  std::size_t iterations = 0, warmup = 0, block = 0;  // round trips: the schedule
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LatencyAgentOptions, id, requests, events, serverKey, publicKey, secretKey,
                                   iterations, warmup, block)
// Times the schedule's round trips; writes {"bus": [NS, ...], "raw": [...], ...} (a list per path) on stdout.
int runRoundTripAgent(const LatencyAgentOptions& options);
// Answers every Pause on any path with a PauseAck until it is stopped or idle for kAgentIdleTimeout.
int runPauseAgent(const LatencyAgentOptions& options);

// A bus measurement beside its raw ZeroMQ baseline from the same run, in microseconds; with CURVE, raw is raw CURVE
// and rawPlain raw over plain tcp.
struct LatencyComparison {
  Summary bus;
  Summary raw;
  std::optional<Summary> rawPlain;
  double p50Ratio() const { return raw.p50 > 0 ? bus.p50 / raw.p50 : 0; }
  double plainP50Ratio() const { return rawPlain && rawPlain->p50 > 0 ? bus.p50 / rawPlain->p50 : 0; }
};
// The round trip alone, for modes that use it as their same-run baseline (`wsync-bench round`).
LatencyComparison runRoundTripBenchmark(std::size_t roundTrips, std::size_t block, std::ostream& progress);
// `rawPlain`: the columns of a run with CURVE, raw plain beside raw CURVE (rows with LatencyComparison::rawPlain).
std::vector<Table::Column> latencyColumns(Table::Column first, bool rawPlain = false);
std::vector<Cell> latencyRow(Cell first, const LatencyComparison& latency);

void runBusBenchmark(const BusBenchConfig& config, Report& report);

}  // namespace wsync::bench
