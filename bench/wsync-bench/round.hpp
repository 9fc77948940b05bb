#pragma once
// `wsync-bench round`: what an update round costs beyond moving its bytes (method: README.md).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <wsync/bus/channel/shm/shm_arena_data.hpp>

#include "report.hpp"

namespace wsync::bench {

// Each worker's copy into its tensors after a commit: ~100 ms for 64 MiB x 8 workers on 2 cores.
inline constexpr std::chrono::milliseconds kApplyTimeout{30'000};
// Times the apply to 0.1 ms without taking a core from the workers.
inline constexpr std::chrono::microseconds kApplyPollInterval{50};
// How often a worker process looks at its idle deadline while waiting for SIGTERM.
inline constexpr std::chrono::seconds kRoundWorkerSignalSlice{1};
// The tensor-count sweep's buses take turns in blocks this long, so that drifting load hits them alike.
inline constexpr std::size_t kCountBlock = 5;
// Count workers side by side hold weights and staging: refused above this share of MemAvailable.
inline constexpr double kMaxRoundMemoryShare = 0.75;
// Monitors subscribe, prove their subscription and take their first snapshot within this.
inline constexpr std::chrono::milliseconds kMonitorSettle{2000};
inline constexpr std::size_t kMaxMonitors = 256;
// Every worker of a round is a receiver of the coordinator's shm arena.
inline constexpr std::size_t kMaxRoundWorkers = bus::kMaxArenaReceivers;
// The goals (issue): overhead (round - data time) p50 <= 2 ms at 8 workers; monitors within 2%.
inline constexpr double kMaxRoundOverheadMs = 2.0;
inline constexpr std::size_t kRoundGoalWorkers = 8;
inline constexpr double kMaxMonitorSlowdown = 1.02;

struct RoundBenchConfig {
  ModeOptions mode;
  std::vector<std::size_t> workerCounts{1, 8, 32};
  // 1 MiB: data small next to control; "tiny" (4 KiB): the round is the control itself.
  std::vector<std::string> models{"synthetic:16:1", "tiny"};
  // Same bytes, different tensor counts.
  std::vector<std::string> countModels{"synthetic:10:64", "synthetic:1000:64", "synthetic:20000:64"};
  std::size_t countWorkers = kRoundGoalWorkers;
  // The first round carries the manifest and faults in the staging; later ones settle caches.
  std::size_t warmup = 20;
  std::size_t rounds = 300;               // per worker count and small manifest
  std::size_t countRounds = 60;           // per manifest of the tensor-count sweep (64 MiB each)
  std::size_t baselineRoundTrips = 5000;  // per path, before and after the rounds
  // Small buckets bound what receivers still copy after the send (control messages do not depend on the size).
  std::uint64_t bucketKiB = 256;
  std::size_t monitors = 0;
  void quick() {
    warmup = 5;
    rounds = 40;
    countRounds = 10;
    baselineRoundTrips = 500;
  }  // every table in ~15 s
};

// A worker process (agent-round-worker): a WorkerAgent in front of an idle engine, until SIGTERM (exit 0) or
// kAgentIdleTimeout without a pause (exit 2).
struct RoundWorkerOptions {
  std::string bus;
  std::string id;
  std::string model;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RoundWorkerOptions, bus, id, model)
int runRoundWorker(const RoundWorkerOptions& options);

void runRoundBenchmark(const RoundBenchConfig& config, Report& report);

}  // namespace wsync::bench
