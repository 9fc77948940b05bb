#include "machine_load.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "bench_failure.hpp"


namespace wsync::bench {
namespace {

double seconds(const timeval& time) {
  return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_usec) / 1e6;
}

double cpuSeconds(int who) {
  rusage usage{};
  if (::getrusage(who, &usage) != 0) return 0;
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

MachineLoad::MachineLoad() : start_(read()) {}

MachineTicks readMachineTicks() {
  MachineTicks ticks;
  // "cpu  user nice system idle iowait irq softirq steal ...": the first line sums every CPU.
  std::ifstream stat("/proc/stat");
  std::string label;
  stat >> label;
  for (int field = 0; field < 8; ++field) {
    std::uint64_t value = 0;
    if (!(stat >> value)) break;
    ticks.total += value;
    // Idle and iowait are not work; steal (other virtual machines on this host) is, for this purpose.
    if (field != 3 && field != 4) ticks.busy += value;
  }
  return ticks;
}

std::uint64_t availableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

MachineLoad::Reading MachineLoad::read() {
  Reading reading;
  const MachineTicks ticks = readMachineTicks();
  reading.totalTicks = ticks.total;
  reading.busyTicks = ticks.busy;
  reading.ownSeconds = cpuSeconds(RUSAGE_SELF) + cpuSeconds(RUSAGE_CHILDREN);
  return reading;
}

bool MachineLoad::waitForQuiet(double maxBusyShare, std::chrono::milliseconds window,
                               std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  do {
    throwIfInterrupted();
    const Reading before = read();
    std::this_thread::sleep_for(window);
    const Reading after = read();
    const double total = static_cast<double>(after.totalTicks - before.totalTicks);
    if (total > 0 && static_cast<double>(after.busyTicks - before.busyTicks) <= maxBusyShare * total) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

double MachineLoad::othersShare() const {
  const Reading now = read();
  const double ticksPerSecond = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double total = static_cast<double>(now.totalTicks - start_.totalTicks) / ticksPerSecond;
  const double busy = static_cast<double>(now.busyTicks - start_.busyTicks) / ticksPerSecond;
  const double own = now.ownSeconds - start_.ownSeconds;
  if (total <= 0) return 0;
  const double others = (busy - own) / total;
  return others < 0 ? 0 : others;
}

}  // namespace wsync::bench
