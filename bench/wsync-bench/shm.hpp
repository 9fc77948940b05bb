#pragma once
// `wsync-bench shm`: the shm channel from this process (the sender) to receiver processes, beside memcpy.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// A receiver maps the arena and writes every page of its tensors once: about a second for 2 GiB.
inline constexpr std::chrono::milliseconds kReceiverReadyTimeout{120'000};
// 2 GiB to 8 receivers on 2 cores takes seconds: two minutes means a stuck hand-off.
inline constexpr std::chrono::milliseconds kShmTransferTimeout{120'000};
// A receiver waits for its next transfer while the baselines run: seconds at most.
inline constexpr std::chrono::milliseconds kReceiverIdleTimeout{300'000};
// The watchdog's look for a dead receiver: too rare to disturb the copy, often enough to abort.
inline constexpr std::chrono::milliseconds kWatchdogInterval{20};
// The first transfer faults the arena's pages in; caches and clocks settle.
inline constexpr std::size_t kShmWarmupRounds = 2;
// --wait-for-quiet: 90% idle over half a second (our receivers sleep meanwhile), waiting two minutes at most.
inline constexpr double kQuietMaxBusyShare = 0.10;
inline constexpr std::chrono::milliseconds kQuietWindow{500};
inline constexpr std::chrono::milliseconds kQuietWaitLimit{120'000};
// The goal: one sender process to one receiver process at 0.8x of memcpy or better.
inline constexpr double kMinChannelToMemcpyRatio = 0.8;
// Fan-outs whose copies would need more of MemAvailable are skipped (no OOM killer).
inline constexpr double kMaxMemoryShare = 0.5;

struct ShmBenchConfig {
  ModeOptions mode;
  std::vector<std::string> models{"opt-125m", "synthetic:20000:2048"};
  std::vector<std::size_t> fanoutReceivers{3, 8};
  // One receiver: every geometry; the fan-out: the first (4 MiB x 2, see README.md).
  std::vector<std::uint64_t> bucketMiB{4};
  std::vector<std::uint32_t> buffers{2};
  std::size_t repetitions = 11;  // timed per path and measurement
  bool waitForQuiet = false;
  void quick() {
    models = {"opt-125m"};
    fanoutReceivers = {3};
    repetitions = 3;
  }
};

// A receiver (agent-shm-receive) says "ready", then receives transfers 1..N, each reported as
//   done TRANSFER BYTES DIGEST_HI DIGEST_LO FINISH_NS CPU_NS
// FINISH_NS: steady_clock (CLOCK_MONOTONIC, one clock for every process), so no wake-up is timed; CPU_NS: receive()'s.
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
