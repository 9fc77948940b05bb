#pragma once
// What a process holds, read from /proc: resident memory, open descriptors, threads and CPU time. A soak run reads
// it for the coordinator, the trainer (this process) and every worker, over and over, to show that none of them
// grows with the number of rounds or restarts.
#include <sys/types.h>

#include <cstdint>

namespace wsync::bench {

struct ProcessUsage {
  bool alive = false;              // false: /proc/PID is gone (the figures are 0)
  std::uint64_t rssBytes = 0;      // VmRSS of /proc/PID/status: resident anonymous, file and shared memory
  std::uint64_t anonBytes = 0;     // RssAnon: the heap and stacks, where a leak would show
  std::uint64_t shmemBytes = 0;    // RssShmem: pages of shared segments (arena, control block) it has touched
  std::uint32_t fds = 0;           // entries of /proc/PID/fd (for this process: one more, the listing's own)
  std::uint32_t threads = 0;       // Threads of /proc/PID/status
  std::uint64_t cpuTicks = 0;      // utime + stime of /proc/PID/stat, every thread, in clock ticks
  std::uint64_t childCpuTicks = 0; // cutime + cstime: its children that it has reaped
};

ProcessUsage readProcessUsage(pid_t pid);

// The processes whose parent is `parent` (a scan of /proc), and how many of them are zombies: exited but not
// reaped, which a soak with restarts must never accumulate.
struct ChildProcesses {
  std::uint32_t count = 0;  // zombies included
  std::uint32_t zombies = 0;
};

ChildProcesses countChildren(pid_t parent);

}  // namespace wsync::bench
