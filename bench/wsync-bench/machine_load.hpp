#pragma once
// How busy other processes kept the machine during a measurement, and the CPU time that work cost.
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

// CPU time of the calling thread: a futex sleep costs none, so it says how fast a side would go on a core of its own.
std::uint64_t threadCpuNanoseconds();

// MemAvailable of /proc/meminfo; 0 when unknown.
std::uint64_t availableMemoryBytes();

class MachineLoad {
 public:
  // `liveChildren`: processes of the run not yet reaped, whose CPU time is the run's too.
  explicit MachineLoad(std::function<std::vector<pid_t>()> liveChildren = {});

  // The share of all CPU time since construction that other processes used (steal included).
  double othersShare() const;

  // Waits until the CPUs were at least (1 - maxBusyShare) idle over one `window`, for at most `limit`.
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
