#pragma once
#include <sys/types.h>
#include <cstdint>
#include <optional>

namespace wsync::bus {

// A process as the kernel knows it: pid plus start time, so a recycled pid is not mistaken for the original.
struct ProcessIdentity {
  std::uint32_t pid = 0;
  std::uint64_t startTicks = 0;  // field 22 of /proc/PID/stat; 0 when unknown
};

ProcessIdentity currentProcess();

// Start time of `pid`, or nothing when there is no such process.
std::optional<std::uint64_t> processStartTicks(pid_t pid);

// True when `identity` still runs: the pid exists and, when both are known, started at the same time.
bool isAlive(const ProcessIdentity& identity);

}  // namespace wsync::bus
