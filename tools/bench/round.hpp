#pragma once
// `wsync-bench round`: what an update round costs beyond moving its bytes. A coordinator in this process (on a thread
// of its own), N worker processes (real WorkerAgents in front of idle engines) and a TrainerAgent publishing version
// after version in pause mode keep; the trainer's PublishOutcome splits every round into its phases. The same-run
// baseline is the request/reply round trip of `wsync-bench bus`. With --monitors, round times with wsync-mon
// processes attached against the same bus's rounds without them.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <wsync/bus/channel/shm/shm_arena_data.hpp>

#include "report.hpp"

namespace wsync::bench {

// N worker processes start, write every page of their tensors (64 MiB at most) and register: seconds for 32 on 2 cores.
inline constexpr std::chrono::milliseconds kWorkerJoinTimeout{60'000};
inline constexpr std::chrono::milliseconds kWorkerJoinPollInterval{5};
// A round: ms for a small manifest, a few hundred for 64 MiB to 8 workers; the coordinator aborts far sooner.
inline constexpr std::chrono::milliseconds kRoundOutcomeTimeout{60'000};
// After a commit each worker copies its staging into its bound tensors (64 MiB x 8 workers on 2 cores: ~100 ms).
inline constexpr std::chrono::milliseconds kApplyTimeout{30'000};
// Fine enough to time the apply to a tenth of a millisecond, coarse enough not to take a core from the workers.
inline constexpr std::chrono::microseconds kApplyPollInterval{50};
// A worker process looks at its idle deadline this often while it waits for SIGTERM.
inline constexpr std::chrono::seconds kRoundWorkerSignalSlice{1};
// The tensor-count sweep's buses take turns in blocks of this many rounds, so that drifting load hits them alike.
inline constexpr std::size_t kCountBlock = 5;
// Side by side, each count worker holds weights and staging: refused above this share of MemAvailable.
inline constexpr double kMaxRoundMemoryShare = 0.75;
// Monitors need this long to subscribe, prove their subscription live and take their first snapshot.
inline constexpr std::chrono::milliseconds kMonitorSettle{2000};
// wsync-mon stops on SIGTERM at its next redraw (250 ms); then SIGKILL.
inline constexpr std::chrono::milliseconds kMonitorStopGrace{5000};
inline constexpr std::size_t kMaxMonitors = 256;
// Every worker of a round is a receiver of the coordinator's shm arena.
inline constexpr std::size_t kMaxRoundWorkers = bus::kMaxArenaReceivers;

// The goals (issue): round overhead, round time minus data time, at most 2 ms with 8 workers; round times with
// monitors attached within 2% of those without.
inline constexpr double kMaxRoundOverheadMs = 2.0;
inline constexpr std::size_t kRoundGoalWorkers = 8;
inline constexpr double kMaxMonitorSlowdown = 1.02;

struct RoundBenchConfig {
  ModeOptions mode;
  std::vector<std::size_t> workerCounts{1, 8, 32};
  // 1 MiB: data small next to control; 4 KiB ("tiny"): no data time to speak of, the round is the control itself.
  std::vector<std::string> models{"synthetic:16:1", "tiny"};
  // Same bytes, different tensor counts: does the control cost of a round depend on the count?
  std::vector<std::string> countModels{"synthetic:10:64", "synthetic:1000:64", "synthetic:20000:64"};
  bool noCountSweep = false;
  std::size_t countWorkers = kRoundGoalWorkers;
  // The first round carries the manifest and faults in every worker's staging; later warm-up rounds settle caches.
  std::size_t warmup = 20;
  std::size_t rounds = 300;      // per worker count and small manifest
  std::size_t countRounds = 60;  // per manifest of the tensor-count sweep (64 MiB each)
  std::size_t baselineRoundTrips = 5000;  // per path, before and after the rounds
  // Small buckets keep what the receivers still copy after the trainer's last send to at most `buffers` buckets, so
  // that "round time minus send time" is control plus a bounded tail. Bucket size does not change the control
  // messages of a round; the coordinator's default (64 MiB) would put a whole receive after the send.
  std::uint64_t bucketKiB = 256;
  // wsync-mon processes attached for `rounds` rounds between two phases without (a drifting machine favours neither).
  std::size_t monitors = 0;
  void quick() { warmup = 5; rounds = 40; countRounds = 10; baselineRoundTrips = 500; }  // every table in ~15 s
};

// The worker processes (hidden subcommand agent-round-worker): a real WorkerAgent bound to a model's tensors, in
// front of an idle engine whose pause hook returns at once, so that a round costs the process only what the agent
// does. Serves rounds until SIGTERM (Goodbye, exit 0) or until no round has paused it for kAgentIdleTimeout (exit 2).
struct RoundWorkerOptions {
  std::string bus;
  std::string id;
  std::string model;  // a name cli::modelTensors knows: the tensors to bind, the trainer's manifest
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RoundWorkerOptions, bus, id, model)
int runRoundWorker(const RoundWorkerOptions& options);

void runRoundBenchmark(const RoundBenchConfig& config, Report& report);

}  // namespace wsync::bench
