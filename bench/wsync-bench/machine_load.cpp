#include "machine_load.hpp"

#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench_failure.hpp"

namespace wsync::bench {

std::vector<std::string> procStatFields(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  // The command name may hold spaces and parentheses: the fields start after the last ')'.
  if (!std::getline(file, line) || line.rfind(')') == std::string::npos) return {};
  std::istringstream rest(line.substr(line.rfind(')') + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(std::move(field));
  return fields;
}

std::uint64_t processCpuTicks(pid_t pid, bool reapedChildren) {
  const std::vector<std::string> fields = procStatFields(pid);
  if (fields.size() <= 14) return 0;
  const auto field = [&fields](std::size_t number) { return std::strtoull(fields[number - 3].c_str(), nullptr, 10); };
  return field(14) + field(15) + (reapedChildren ? field(16) + field(17) : 0);  // utime stime cutime cstime
}

std::uint64_t threadCpuNanoseconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000U + static_cast<std::uint64_t>(now.tv_nsec);
}

std::uint64_t availableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::string unit;
  for (std::uint64_t kib = 0; meminfo >> key >> kib >> unit;) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

MachineLoad::MachineLoad(std::function<std::vector<pid_t>()> liveChildren)
    : liveChildren_(std::move(liveChildren)), start_(read()) {}

MachineLoad::Reading MachineLoad::read() const {
  Reading reading;
  // "cpu  user nice system idle iowait irq softirq steal ...": the first line sums every CPU.
  std::ifstream stat("/proc/stat");
  std::string label;
  stat >> label;
  for (int field = 0; field < 8; ++field) {
    std::uint64_t value = 0;
    if (!(stat >> value)) break;
    reading.total += value;
    if (field != 3 && field != 4) reading.busy += value;
  }
  reading.own = processCpuTicks(::getpid(), true);
  if (liveChildren_) {
    for (const pid_t child : liveChildren_()) reading.own += processCpuTicks(child);
  }
  return reading;
}

bool MachineLoad::waitForQuiet(double maxBusyShare, std::chrono::milliseconds window, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const MachineLoad load;
  do {
    throwIfInterrupted();
    const Reading before = load.read();
    std::this_thread::sleep_for(window);
    const Reading after = load.read();
    const double total = static_cast<double>(after.total - before.total);
    if (total > 0 && static_cast<double>(after.busy - before.busy) <= maxBusyShare * total) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

double MachineLoad::othersShare() const {
  const Reading now = read();
  const double total = static_cast<double>(now.total - start_.total);
  const double others = static_cast<double>(now.busy - start_.busy) - static_cast<double>(now.own - start_.own);
  return total > 0 && others > 0 ? others / total : 0;
}

}  // namespace wsync::bench
