#pragma once
// CPU time of the calling thread: what a copy cost in work, whatever else the machine's cores were doing meanwhile.
// Sleeps (a futex wait for a peer) cost none, so a side's CPU time per byte says how fast it could go on a core of
// its own, which wall-clock times on a shared machine cannot.
#include <time.h>

#include <cstdint>

namespace wsync::bench {

inline std::uint64_t threadCpuNanoseconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000U + static_cast<std::uint64_t>(now.tv_nsec);
}

}  // namespace wsync::bench
