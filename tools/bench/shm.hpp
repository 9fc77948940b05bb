#pragma once
// `wsync-bench shm`: the shm channel from this process (the sender, which owns the arena) to receiver processes,
// beside memcpy of the same tensors within this process, interleaved round by round. Its parameters, goal, limits,
// receivers and results.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "report.hpp"
#include "stats.hpp"

namespace wsync::bench {

// Starting a receiver: mapping the arena and writing every page of its destination tensors once (2 GiB take about
// a second; 8 receivers starting together share 2 cores).
inline constexpr std::chrono::milliseconds kReceiverReadyTimeout{120'000};
// One timed transfer: 2 GiB to 8 receivers through 2 cores takes seconds; two minutes means a stuck hand-off.
inline constexpr std::chrono::milliseconds kShmTransferTimeout{120'000};
// A receiver's wait for the next transfer: between two channel transfers the benchmark runs the baselines and moves
// the source to its next version, seconds at most on 2 GiB.
inline constexpr std::chrono::milliseconds kReceiverIdleTimeout{300'000};

// How often a transfer's watchdog looks for a dead receiver or an interruption: a waitid per receiver, far too rare
// to disturb the copy, frequent enough that a failure is reported at once.
inline constexpr std::chrono::milliseconds kWatchdogInterval{20};

// Tensors start at multiples of 256 bytes in a bucket, as for GPU copies (docs/bucket-plan.md).
inline constexpr std::uint32_t kShmPlanAlignment = 256;
// Any value: content is a pure function of (seed, tensor, version), so runs are comparable.
inline constexpr std::uint64_t kShmContentSeed = 20261122;

// Defaults, chosen by the geometry comparison in tools/bench/README.md: buckets of 1-4 MiB beat 16-64 MiB on both
// models (a bucket the sender has just written is still in the cache when the receiver copies it, and the pipeline
// fills and drains in a sixtieth of opt-125m instead of a quarter); 4 MiB x 2 was within the spread of the best.
inline constexpr std::uint64_t kDefaultBucketMiB = 4;
inline constexpr std::uint32_t kDefaultBuffers = 2;
// Timed repetitions per path; a full run of both models stays within a few minutes on a shared 2-core machine.
inline constexpr std::size_t kDefaultShmRepetitions = 11;
inline constexpr std::size_t kDefaultSweepRepetitions = 5;
// --quick: one model and one fan-out, enough to show every table within seconds.
inline constexpr std::size_t kQuickShmRepetitions = 3;
// Unmeasured rounds of every path first: the arena's pages are faulted in by the first transfer, caches and the
// clock frequency settle.
inline constexpr std::size_t kShmWarmupRounds = 2;

// --wait-for-quiet: a round starts once the machine's CPUs were at least 90% idle over half a second (the benchmark's
// own receivers sleep meanwhile), or after two minutes of waiting, which the report counts.
inline constexpr double kQuietMaxBusyShare = 0.10;
inline constexpr std::chrono::milliseconds kQuietWindow{500};
inline constexpr std::chrono::milliseconds kQuietWaitLimit{120'000};

// The goal: the channel from one sender process to one receiver process at 0.8x of plain memcpy or better.
inline constexpr double kMinChannelToMemcpyRatio = 0.8;
// Every receiver holds a copy of the model: a fan-out is skipped when their copies would need more than half the
// memory the kernel calls available (after the benchmark's own two copies), so that a machine shared with others is
// never pushed towards the OOM killer.
inline constexpr double kMaxMemoryShare = 0.5;

struct ShmBenchConfig {
  ModeOptions mode;
  std::vector<std::string> models{"opt-125m", "synthetic:20000:2048"};
  std::vector<std::size_t> fanoutReceivers{3, 8};
  std::uint64_t bucketMiB = kDefaultBucketMiB;
  std::uint32_t buffers = kDefaultBuffers;
  std::size_t repetitions = kDefaultShmRepetitions;  // timed per path and measurement
  // Extra one-receiver measurements, every bucket size with every buffer count, on every model.
  std::vector<std::uint64_t> sweepBucketMiB;
  std::vector<std::uint32_t> sweepBuffers;
  std::size_t sweepRepetitions = kDefaultSweepRepetitions;
  bool waitForQuiet = false;  // start every round on an idle machine (see kQuietMaxBusyShare)
};

// The receivers (hidden subcommand agent-shm-receive): each opens the arena, writes every page of its destination
// tensors once, says "ready" on stdout and then receives transfers 1..N in order, reporting each on stdout as
//   done TRANSFER BYTES DIGEST_HI DIGEST_LO FINISH_NS CPU_NS
// where FINISH_NS is steady_clock (CLOCK_MONOTONIC, one clock for every process of the machine) when receive()
// returned, so the benchmark can time a transfer until its last receiver finished without a wake-up in between, and
// CPU_NS the CPU time receive() took (its sleeps cost none).
struct ShmReceiverOptions {
  std::string arena;
  std::uint32_t receiver = 0;
  std::string model;  // a name cli::modelTensors knows
  std::uint64_t transfers = 0;
};
int runShmReceiver(const ShmReceiverOptions& options);

// Throughputs in GB/s (10^9 bytes per second of model bytes) over the timed repetitions.
struct ShmMeasurement {
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t modelBytes = 0;
  std::size_t receivers = 0;
  std::uint64_t bucketBytes = 0;
  std::uint32_t buffers = 0;
  std::uint32_t buckets = 0;  // of the plan

  Summary channel;     // from the sender's start until the last receiver finished: what each receiver got
  Summary sender;      // from the sender's start until send() returned (the last bucket published)
  Summary memcpy;      // in this process, tensor by tensor from the source to a second copy of the model
  Summary copyDigest;  // memcpy, then XXH3-128 over the copy: the plain way to move and check the bytes
  // GB per CPU-second of the thread doing the work (sleeps excluded), robust against other processes' load: how fast
  // each side would go on a core of its own. For several receivers, the one that took the most.
  Summary senderCpu;
  Summary receiverCpu;
  Summary memcpyCpu;
  Summary copyDigestCpu;

  std::size_t digestsCompared = 0;  // receivers x transfers, warm-up included
  std::size_t digestsEqual = 0;     // a receiver's digest and byte count equal to the sender's
  std::string skipped;              // why the measurement did not run; empty when it did
  double othersCpuShare = 0;        // of all CPU time during the measurement, used by other processes
  std::size_t busyRounds = 0;       // --wait-for-quiet: rounds that started without the machine having been quiet

  double ratio() const { return memcpy.median > 0 ? channel.median / memcpy.median : 0; }
};

struct ShmResults {
  std::vector<ShmMeasurement> single;  // one receiver, the configured geometry, one per model
  std::vector<ShmMeasurement> fanout;
  std::vector<ShmMeasurement> sweep;   // one receiver, other geometries
  std::string arenaExample;            // an arena name of the run, to show where the segments live
  std::uint64_t availableMemoryBytes = 0;
  std::string hugePages;               // transparent huge page modes, for anonymous memory and for shm
  double othersCpuShare = 0;           // of all CPU time during the run, used by other processes
};

// Progress lines go to `progress`; failures throw BenchFailure after the receivers are stopped.
ShmResults measureShm(const ShmBenchConfig& config, std::ostream& progress);

// The mode: measures, then fills the report.
void runShmBenchmark(const ShmBenchConfig& config, Report& report);

}  // namespace wsync::bench
