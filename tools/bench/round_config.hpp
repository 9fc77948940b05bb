#pragma once
// Parameters of one `wsync-bench round` run, and the limits every wait in it is bounded by.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <wsync/bus/channel/shm/shm_arena_data.hpp>

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

// Monitors attached for `wsync-bench monitors` need this long to subscribe, prove their subscription live and take
// their first snapshot (they do all three within a heartbeat interval or two).
inline constexpr std::chrono::milliseconds kMonitorSettle{2000};
// The goal (issue): round times with 10 monitors attached within 2% of those without.
inline constexpr std::size_t kDefaultMonitors = 10;
inline constexpr double kMaxMonitorSlowdown = 1.02;

// Every worker of a round is a receiver of the coordinator's shm arena.
inline constexpr std::size_t kMaxRoundWorkers = bus::kMaxArenaReceivers;

// The goal (issue): round overhead, round time minus data time, at most 2 ms with 8 workers.
inline constexpr double kMaxRoundOverheadMs = 2.0;
inline constexpr std::size_t kRoundGoalWorkers = 8;

struct RoundBenchConfig {
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
  bool quick = false;
  std::string outPath;
  std::string jsonPath;
  std::string commit;
};

}  // namespace wsync::bench
