#pragma once
// How busy other processes kept the machine during a run: on a shared machine the figures mean little when others
// used the cores the benchmark needed, and the report says so instead of leaving it to guesswork. And the CPU time of
// one thread: what a copy cost in work, whatever else the cores were doing meanwhile.
#include <time.h>

#include <chrono>
#include <cstdint>

namespace wsync::bench {

// CPU time of the whole machine from /proc/stat, in clock ticks, summed over every CPU.
struct MachineTicks {
  std::uint64_t total = 0;  // every state
  std::uint64_t busy = 0;   // total less idle and iowait
};
MachineTicks readMachineTicks();

// CPU time of the calling thread. Sleeps (a futex wait for a peer) cost none, so a side's CPU time per byte says how
// fast it could go on a core of its own, which wall-clock times on a shared machine cannot.
inline std::uint64_t threadCpuNanoseconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000U + static_cast<std::uint64_t>(now.tv_nsec);
}

// MemAvailable of /proc/meminfo: what can be allocated without swapping or reclaim trouble; 0 when unknown.
std::uint64_t availableMemoryBytes();

class MachineLoad {
 public:
  MachineLoad();  // starts the interval

  // The share of all CPU time since construction that processes other than this one and its reaped children used
  // (0 = none, 1 = every core all the time). Call after the agents have been reaped.
  double othersShare() const;

  // Waits until the machine's CPUs were at least (1 - maxBusyShare) idle over one `window`, for at most `limit`;
  // false if they never were. For shared machines: a round started while others compile measures them, not us.
  static bool waitForQuiet(double maxBusyShare, std::chrono::milliseconds window, std::chrono::milliseconds limit);

 private:
  struct Reading {
    std::uint64_t totalTicks = 0;  // /proc/stat, all CPUs
    std::uint64_t busyTicks = 0;   // total less idle and iowait
    double ownSeconds = 0;         // user + system of this process and its reaped children
  };
  static Reading read();

  Reading start_;
};

}  // namespace wsync::bench
