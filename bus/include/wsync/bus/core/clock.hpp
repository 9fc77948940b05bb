#pragma once
#include <time.h>

#include <cstdint>

namespace wsync::bus {

// CLOCK_MONOTONIC in milliseconds: the same clock in every process of a host, so heartbeat words written by one
// process are judged by another. vDSO, no syscall.
inline std::uint64_t monotonicMillis() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000U + static_cast<std::uint64_t>(now.tv_nsec) / 1'000'000U;
}

}  // namespace wsync::bus
