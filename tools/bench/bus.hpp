#pragma once
// `wsync-bench bus`: the control plane through the bus library against raw ZeroMQ doing the same work (a
// request/reply round trip; "publish pause, collect N acks"), interleaved block by block in the same run, and the
// shared-memory read of an applied version against a process-local atomic.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// Microseconds on an idle host; five seconds leave room for a loaded 2-core machine starting 32 agents.
inline constexpr std::chrono::milliseconds kReplyTimeout{5000};
// Starting N agent processes and getting every SUB socket subscribed (32 agents on 2 cores take a few seconds).
inline constexpr std::chrono::milliseconds kJoinTimeout{30000};
// Probe pauses go out this often while agents join: often enough to join quickly, rare enough not to flood.
inline constexpr std::chrono::milliseconds kProbeInterval{20};
// After joining, acks to earlier probes may still be on their way; the path is clean after this much silence.
inline constexpr std::chrono::milliseconds kDrainQuiet{100};

inline constexpr std::size_t kDefaultBlock = 50;
// Routing ids and process counts stay sane; the bus itself caps agents at kMaxAgents slots.
inline constexpr std::size_t kMaxBenchAgents = 128;

// The goals (issue): bus p50 within 1.3x of raw ZeroMQ; version read under 20 ns.
inline constexpr double kMaxBusToRawRatio = 1.3;
inline constexpr double kMaxVersionReadNs = 20.0;

struct BusBenchConfig {
  ModeOptions mode;
  std::size_t roundTrips = 20000;  // measured request/reply round trips per path
  std::size_t pauseRounds = 2000;  // measured pause rounds per path, for each agent count
  std::size_t block = kDefaultBlock;  // iterations per block; blocks alternate bus and raw
  std::vector<std::size_t> agentCounts{1, 8, 32};
  std::uint64_t versionReads = 20'000'000;  // reads per timed repetition
  std::size_t versionRepetitions = 11;
  void quick() { roundTrips = 1000; pauseRounds = 100; versionReads = 2'000'000; versionRepetitions = 5; }
};

// Unmeasured iterations on each path before the first measured block: connections, allocator, caches.
inline std::size_t warmupFor(std::size_t iterations) { return iterations / 10 < 10 ? 10 : iterations / 10; }

// The agents (hidden subcommands agent-roundtrip and agent-pause). Each serves both paths, so that one process, with
// one scheduling history, serves both sides of a comparison.
struct LatencyAgentOptions {
  std::string id;  // routing id, the same on both paths
  std::string busRequests, busEvents, rawRequests, rawEvents;
  std::size_t iterations = 0, warmup = 0, block = 0;  // round trips: the schedule, computed alike by the benchmark
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LatencyAgentOptions, id, busRequests, busEvents, rawRequests, rawEvents,
                                   iterations, warmup, block)
// Times round trips through both paths as the schedule says, writes the samples on stdout as two lines ("bus NS NS
// ...", then "raw ..."), exits.
int runRoundTripAgent(const LatencyAgentOptions& options);
// Answers every Pause on either path with a PauseAck until it is stopped or idle for kAgentIdleTimeout.
int runPauseAgent(const LatencyAgentOptions& options);

// A bus measurement beside its raw ZeroMQ baseline from the same run, in microseconds.
struct LatencyComparison {
  Summary bus;
  Summary raw;
  double p50Ratio() const { return raw.p50 > 0 ? bus.p50 / raw.p50 : 0; }
};
// The round trip alone, for modes that use it as their same-run baseline (`wsync-bench round`).
LatencyComparison runRoundTripBenchmark(std::size_t roundTrips, std::size_t block, std::ostream& progress);
// The columns of a bus-vs-raw table (the first named `first`), and a row of it.
std::vector<Table::Column> latencyColumns(Table::Column first);
std::vector<Cell> latencyRow(Cell first, const LatencyComparison& latency);

void runBusBenchmark(const BusBenchConfig& config, Report& report);

}  // namespace wsync::bench
