#pragma once
// Parameters of one `wsync-bench bus` run, its goals, and the limits every wait in it is bounded by.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// A reply or an ack on an idle host takes microseconds; a second of silence means the peer died or is stuck.
// Five seconds leaves room for a loaded 2-core machine that is also starting 32 agent processes.
inline constexpr std::chrono::milliseconds kReplyTimeout{5000};
// Starting N agent processes and getting every SUB socket subscribed (32 agents on 2 cores take a few seconds).
inline constexpr std::chrono::milliseconds kJoinTimeout{30000};
// Probe pauses go out this often while agents join: often enough to join quickly, rare enough not to flood.
inline constexpr std::chrono::milliseconds kProbeInterval{20};
// After joining, acks to earlier probes may still be on their way; the path is clean after this much silence.
inline constexpr std::chrono::milliseconds kDrainQuiet{100};

// Defaults: a full run stays well under two minutes on a shared 2-core machine (32 agents dominate it); --quick
// shows every table within a few seconds.
inline constexpr std::size_t kDefaultPauseRounds = 2000;
inline constexpr std::size_t kDefaultRoundTrips = 20000;
inline constexpr std::size_t kDefaultBlock = 50;
inline constexpr std::uint64_t kDefaultVersionReads = 20'000'000;
inline constexpr std::size_t kDefaultVersionRepetitions = 11;
inline constexpr std::size_t kQuickPauseRounds = 100;
inline constexpr std::size_t kQuickRoundTrips = 1000;
inline constexpr std::uint64_t kQuickVersionReads = 2'000'000;
inline constexpr std::size_t kQuickVersionRepetitions = 5;
// Routing ids and process counts stay sane; the bus itself caps agents at kMaxAgents slots.
inline constexpr std::size_t kMaxBenchAgents = 128;

// The goals (issue): bus p50 within 1.3x of raw ZeroMQ; version read under 20 ns.
inline constexpr double kMaxBusToRawRatio = 1.3;
inline constexpr double kMaxVersionReadNs = 20.0;

struct BusBenchConfig {
  ModeOptions mode;
  std::size_t roundTrips = kDefaultRoundTrips;    // measured request/reply round trips per path
  std::size_t pauseRounds = kDefaultPauseRounds;  // measured pause rounds per path, for each agent count
  std::size_t block = kDefaultBlock;              // iterations per block; blocks alternate bus and raw
  std::vector<std::size_t> agentCounts{1, 8, 32};
  std::uint64_t versionReads = kDefaultVersionReads;  // reads per timed repetition
  std::size_t versionRepetitions = kDefaultVersionRepetitions;
};

// Unmeasured iterations on each path before the first measured block: connections, allocator, caches.
inline std::size_t warmupFor(std::size_t iterations) { return iterations / 10 < 10 ? 10 : iterations / 10; }

// The agents of the latency measurements (hidden subcommands agent-roundtrip and agent-pause). Each serves both
// paths, bus and raw, so that one process, with one scheduling history, serves both sides of a comparison.
struct LatencyAgentOptions {
  std::string id;  // routing id, the same on both paths
  std::string busRequests;
  std::string busEvents;
  std::string rawRequests;
  std::string rawEvents;
  // Round trips only: the schedule, which the benchmark computes alike.
  std::size_t iterations = 0;
  std::size_t warmup = 0;
  std::size_t block = 0;
};

// Sends requests through both paths as the schedule says, times each round trip, writes the samples on stdout as two
// lines ("bus NS NS ...", then "raw ..."), exits.
int runRoundTripAgent(const LatencyAgentOptions& options);
// Answers every Pause on either path with a PauseAck until it is stopped (SIGTERM) or idle for kAgentIdleTimeout.
int runPauseAgent(const LatencyAgentOptions& options);

// The mode: measures, then fills the report.
void runBusBenchmark(const BusBenchConfig& config, Report& report);

}  // namespace wsync::bench
