#pragma once
// Blocking on a 32-bit word in shared memory until another process changes it: how payload channels hand buckets
// between a trainer and its workers without spinning. std::atomic<T>::wait cannot do this: libstdc++ waits on
// private futexes (or a process-local table), which a waker in another process never reaches.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace wsync::bus {

enum class FutexWait : std::uint8_t {
  Woken,  // woken, or the word already differed from `expected`: look at it again
  TimedOut,
  Interrupted,  // a signal arrived: look at the word and at the reason for the signal
};

// Sleeps while `word` == `expected`, at most `timeout`. Spurious wake-ups are possible, so callers loop on their
// condition. `word` must live in memory shared with the waker (or in this process).
FutexWait waitWhileEqual(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                         std::chrono::nanoseconds timeout);

// Wakes every process and thread sleeping in waitWhileEqual on `word`. Call after changing it.
void wakeAll(const std::atomic<std::uint32_t>& word);

}  // namespace wsync::bus
