#pragma once
// `wsync-bench round`: what an update round costs beyond moving its bytes. A coordinator in this process (on a thread
// of its own), N worker processes (real WorkerAgents in front of idle engines) and a TrainerAgent that publishes
// version after version in pause mode keep; the trainer's PublishOutcome splits every round into its phases. The
// same-run baseline is the request/reply round trip of `wsync-bench bus`. Its parameters, goals, limits, workers and
// results.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/shm/shm_arena_data.hpp>

#include "bus.hpp"
#include "report.hpp"

namespace wsync::bench {

// Starting N worker processes: each maps and writes every page of its bound tensors (64 MiB at most here) and
// registers; 32 of them on 2 cores take a few seconds.
inline constexpr std::chrono::milliseconds kWorkerJoinTimeout{60'000};
// How often the benchmark looks at the control block while workers join.
inline constexpr std::chrono::milliseconds kWorkerJoinPollInterval{5};
// One round: milliseconds for a small manifest, a few hundred for 64 MiB to 8 workers on 2 cores. A minute
// without an outcome is a stuck round; the coordinator's own phase timeouts abort far sooner.
inline constexpr std::chrono::milliseconds kRoundOutcomeTimeout{60'000};
// After a commit each worker copies its staging into its bound tensors (64 MiB x 8 workers on 2 cores: ~100 ms).
inline constexpr std::chrono::milliseconds kApplyTimeout{30'000};
// How often the benchmark reads the workers' applied versions while they copy: fine enough to time the apply to
// a tenth of a millisecond, coarse enough not to take a core from the workers it waits for.
inline constexpr std::chrono::microseconds kApplyPollInterval{50};
// A worker process looks at its idle deadline this often while it waits for SIGTERM.
inline constexpr std::chrono::seconds kRoundWorkerSignalSlice{1};

// Defaults: a full run takes about a minute on a 2-core machine (the 64 MiB rounds take half of it).
// The first round carries the manifest and faults in every worker's staging; later warm-up rounds settle caches.
inline constexpr std::size_t kDefaultRoundWarmup = 20;
inline constexpr std::size_t kDefaultRounds = 300;       // per worker count and small manifest
inline constexpr std::size_t kDefaultCountRounds = 60;   // per manifest of the tensor-count sweep (64 MiB each)
// The manifests of the tensor-count sweep take turns in blocks of this many rounds, each on its own bus, so that
// the drifting load of a shared machine hits them alike.
inline constexpr std::size_t kCountBlock = 5;
inline constexpr std::size_t kDefaultBaselineRoundTrips = 5000;  // per path, before and after the rounds
// --quick: every table within about 15 seconds on 2 cores.
inline constexpr std::size_t kQuickRoundWarmup = 5;
inline constexpr std::size_t kQuickRounds = 40;
inline constexpr std::size_t kQuickCountRounds = 10;
inline constexpr std::size_t kQuickBaselineRoundTrips = 500;
// Small buckets keep what the receivers still copy after the trainer's last send to at most `buffers` buckets
// (the sender refills a buffer only once every receiver drained it), so that the trainer's send time covers most
// of the data and "round time minus send time" is control plus a bounded tail. The coordinator's default (64 MiB)
// would put a whole receive after the send. Bucket size does not change the control messages of a round.
inline constexpr std::uint64_t kDefaultRoundBucketKiB = 256;
// The tensor-count sweep runs its buses side by side, each worker holding its weights and a staging copy: refused
// when that would need more than this share of the memory the kernel calls available.
inline constexpr double kMaxRoundMemoryShare = 0.75;

// Monitors attached (--monitors) need this long to subscribe, prove their subscription live and take their first
// snapshot (they do all three within a heartbeat interval or two).
inline constexpr std::chrono::milliseconds kMonitorSettle{2000};
// wsync-mon stops on SIGTERM at its next redraw (250 ms); then SIGKILL.
inline constexpr std::chrono::milliseconds kMonitorStopGrace{5000};
// The goal (issue): round times with 10 monitors attached within 2% of those without.
inline constexpr double kMaxMonitorSlowdown = 1.02;
inline constexpr std::size_t kMaxMonitors = 256;

// Every worker of a round is a receiver of the coordinator's shm arena.
inline constexpr std::size_t kMaxRoundWorkers = bus::kMaxArenaReceivers;

// The goal (issue): round overhead, round time minus data time, at most 2 ms with 8 workers.
inline constexpr double kMaxRoundOverheadMs = 2.0;
inline constexpr std::size_t kRoundGoalWorkers = 8;

struct RoundBenchConfig {
  ModeOptions mode;
  std::vector<std::size_t> workerCounts{1, 8, 32};
  // About 1 MiB, so that the data of a round is small next to its control; and 4 KiB ("tiny"), where there is no
  // data time to speak of and the round time is the control overhead itself.
  std::vector<std::string> models{"synthetic:16:1", "tiny"};
  // Same bytes, different tensor counts: does the control cost of a round depend on the count?
  std::vector<std::string> countModels{"synthetic:10:64", "synthetic:1000:64", "synthetic:20000:64"};
  std::size_t countWorkers = kRoundGoalWorkers;
  std::size_t warmup = kDefaultRoundWarmup;
  std::size_t rounds = kDefaultRounds;
  std::size_t countRounds = kDefaultCountRounds;
  std::size_t baselineRoundTrips = kDefaultBaselineRoundTrips;
  std::uint64_t bucketKiB = kDefaultRoundBucketKiB;
  // wsync-mon processes (live view) attached to every bus of the worker sweep for `rounds` rounds, between two
  // phases of `rounds` without them (so that a drifting machine favours neither); 0: none.
  std::size_t monitors = 0;
  std::string monBinary;  // wsync-mon: beside wsync-bench (an install), else this build's
};

// The worker processes (hidden subcommand agent-round-worker): a real WorkerAgent bound to a model's tensors, in
// front of an idle engine whose pause hook returns at once, so that a round costs the process only what the agent
// does. Serves rounds until SIGTERM (Goodbye, exit 0) or until no round has paused it for kAgentIdleTimeout (the
// benchmark is stuck: exit 2).
struct RoundWorkerOptions {
  std::string bus;    // the benchmark's coordinator
  std::string id;     // agent id
  std::string model;  // a name cli::modelTensors knows: the tensors to bind, the trainer's manifest
};
int runRoundWorker(const RoundWorkerOptions& options);

// The data a round's overhead cannot shed: when the trainer's send returns, each receiver still has the last buckets
// of the ring to copy out and digest (at most one per buffer, since the sender refills a buffer only once every
// receiver has drained it). Measured in this process, as one receiver would do it: a memcpy and an XXH3-128 update
// per piece of those buckets. A reference for the reader, not subtracted from anything.
struct ReceiveTail {
  std::uint64_t bytes = 0;  // in the last min(buffers, buckets) buckets
  double medianUs = 0;      // one receiver's copy and digest of them, warm caches
};

// `source` is indexed like the plan's manifest; `scratch` likewise, with the same sizes.
ReceiveTail measureReceiveTail(const bus::BucketPlan& plan, std::uint32_t buffers,
                               std::span<const std::span<const std::byte>> source,
                               std::span<const std::span<std::byte>> scratch);

// One configuration (N workers, one manifest): percentiles over its measured rounds, in microseconds.
struct RoundMeasurement {
  std::size_t workers = 0;
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  std::uint32_t buckets = 0;
  std::size_t warmup = 0;
  double joinMs = 0;          // the worker processes started until every one is registered
  double firstRoundMs = 0;    // round 1: carries the manifest to every worker and faults in their staging
  ReceiveTail tail;           // reference: one receiver's copy of what is left to it when the send returns
  double othersCpuShare = 0;  // CPU time of processes other than the benchmark's, as a share of all cores
  Summary total;              // PublishOutcome::total: BeginUpdate sent -> Commit handled by the trainer
  Summary sending;            // PublishOutcome::sending: the trainer's send of every bucket, the data
  Summary overhead;           // total - sending, round by round
  Summary untilPlan;          // PublishOutcome::untilPlan: BeginUpdate -> TransferPlan (begin, pause, acks)
  Summary afterSend;          // send returned -> Commit: last buckets received, UpdateDones, verify, commit
  Summary caller;             // publish() called -> waitOutcome() returned, in the trainer's own thread
  Summary apply;              // waitOutcome() returned -> every worker reports the version applied
  Summary withMonitors;       // --monitors: `total` of the rounds with them attached (the others are without)
};

struct RoundResults {
  LatencyComparison baselineBefore;  // request/reply round trip with one agent process, before the rounds
  LatencyComparison baselineAfter;   // the same after them: the two show how much the machine drifted
  std::vector<RoundMeasurement> workerSweep;  // config.models, for each worker count
  std::vector<RoundMeasurement> countSweep;   // config.countWorkers, for each of config.countModels
  std::string busExample;                     // the name of one bus, to show where the endpoints were
  double othersCpuShare = 0;
  // The raw ZeroMQ round trip p50 that overheads are compared with: the mean of before and after.
  double rawRoundTripUs() const { return (baselineBefore.raw.p50 + baselineAfter.raw.p50) / 2; }
};

// Progress lines go to `progress`; failures throw BenchFailure after every process is stopped.
RoundResults measureRounds(const RoundBenchConfig& config, std::ostream& progress);

// The mode: measures, then fills the report.
void runRoundBenchmark(const RoundBenchConfig& config, Report& report);

}  // namespace wsync::bench
