#pragma once
// `wsync-bench shm`: the shm channel from this process (the sender, which owns the arena) to receiver processes,
// beside memcpy of the same tensors within this process, interleaved round by round.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// A receiver maps the arena and writes every page of its tensors once: about a second for 2 GiB.
inline constexpr std::chrono::milliseconds kReceiverReadyTimeout{120'000};
// One timed transfer: 2 GiB to 8 receivers through 2 cores takes seconds; two minutes means a stuck hand-off.
inline constexpr std::chrono::milliseconds kShmTransferTimeout{120'000};
// A receiver's wait for the next transfer, while the benchmark runs the baselines: seconds at most on 2 GiB.
inline constexpr std::chrono::milliseconds kReceiverIdleTimeout{300'000};
// A transfer's watchdog looks for a dead receiver this often: too rarely to disturb the copy, often enough to abort.
inline constexpr std::chrono::milliseconds kWatchdogInterval{20};
// Tensors start at multiples of 256 bytes in a bucket, as for GPU copies (docs/bucket-plan.md).
inline constexpr std::uint32_t kShmPlanAlignment = 256;
// Unmeasured rounds of every path first: the first transfer faults the arena's pages in; caches and the clock settle.
inline constexpr std::size_t kShmWarmupRounds = 2;
// --wait-for-quiet: a round starts once the CPUs were at least 90% idle over half a second (the benchmark's own
// receivers sleep meanwhile), or after two minutes of waiting, which the report counts.
inline constexpr double kQuietMaxBusyShare = 0.10;
inline constexpr std::chrono::milliseconds kQuietWindow{500};
inline constexpr std::chrono::milliseconds kQuietWaitLimit{120'000};
// The goal: the channel from one sender process to one receiver process at 0.8x of plain memcpy or better.
inline constexpr double kMinChannelToMemcpyRatio = 0.8;
// A fan-out whose receivers' copies would need more than this share of MemAvailable is skipped (no OOM killer).
inline constexpr double kMaxMemoryShare = 0.5;

struct ShmBenchConfig {
  ModeOptions mode;
  std::vector<std::string> models{"opt-125m", "synthetic:20000:2048"};
  std::vector<std::size_t> fanoutReceivers{3, 8};
  bool noFanout = false;
  // One receiver with every bucket size and buffer count; the fan-out with the first of each. 4 MiB x 2: the
  // geometry comparison in tools/bench/README.md.
  std::vector<std::uint64_t> bucketMiB{4};
  std::vector<std::uint32_t> buffers{2};
  std::size_t repetitions = 11;  // timed per path and measurement
  bool waitForQuiet = false;     // start every round on an idle machine (kQuietMaxBusyShare)
  void quick() { models = {"opt-125m"}; fanoutReceivers = {3}; repetitions = 3; }
};

// The receivers (hidden subcommand agent-shm-receive): each opens the arena, writes every page of its destination
// tensors once, says "ready" and then receives transfers 1..N in order, reporting each as
//   done TRANSFER BYTES DIGEST_HI DIGEST_LO FINISH_NS CPU_NS
// FINISH_NS: steady_clock (CLOCK_MONOTONIC, one clock for every process) when receive() returned, so a transfer is
// timed until its last receiver finished without a wake-up in between; CPU_NS: the CPU time receive() took.
struct ShmReceiverOptions {
  std::string arena;
  std::uint32_t receiver = 0;
  std::string model;  // a name cli::modelTensors knows
  std::uint64_t transfers = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ShmReceiverOptions, arena, receiver, model, transfers)
int runShmReceiver(const ShmReceiverOptions& options);

void runShmBenchmark(const ShmBenchConfig& config, Report& report);

}  // namespace wsync::bench
