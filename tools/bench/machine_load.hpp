#pragma once
// How busy other processes kept the machine during a measurement: on a shared machine figures mean little when
// others used the cores the benchmark needed, and the report says so instead of leaving it to guesswork. And the CPU
// time of one thread or process: what work cost, whatever else the cores were doing meanwhile.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wsync::bench {

// The fields of /proc/PID/stat after the command name: index 0 is field 3 (state) of proc(5). Empty when it is gone.
std::vector<std::string> procStatFields(pid_t pid);

// utime + stime of a process, every thread, in clock ticks; with `reapedChildren`, its reaped children's too.
std::uint64_t processCpuTicks(pid_t pid, bool reapedChildren = false);

// CPU time of the calling thread. A sleep (a futex wait for a peer) costs none, so a side's CPU time per byte says
// how fast it could go on a core of its own, which wall-clock times on a shared machine cannot.
std::uint64_t threadCpuNanoseconds();

// MemAvailable of /proc/meminfo: what can be allocated without swapping or reclaim trouble; 0 when unknown.
std::uint64_t availableMemoryBytes();

class MachineLoad {
 public:
  // `liveChildren`: processes of the run not yet reaped, whose CPU time is the run's too.
  explicit MachineLoad(std::function<std::vector<pid_t>()> liveChildren = {});

  // The share of all CPU time since construction that other processes used (0: none, 1: every core all the time);
  // steal (other virtual machines) counts as others'.
  double othersShare() const;

  // Waits until the CPUs were at least (1 - maxBusyShare) idle over one `window`, for at most `limit`; false if they
  // never were. For shared machines: a round started while others compile measures them, not us.
  static bool waitForQuiet(double maxBusyShare, std::chrono::milliseconds window, std::chrono::milliseconds limit);

 private:
  struct Reading {
    std::uint64_t total = 0;  // /proc/stat, every CPU
    std::uint64_t busy = 0;   // total less idle and iowait
    std::uint64_t own = 0;    // this process, its reaped children and the live ones
  };
  Reading read() const;

  std::function<std::vector<pid_t>()> liveChildren_;
  Reading start_;
};

}  // namespace wsync::bench
