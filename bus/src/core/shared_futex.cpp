#include "wsync/bus/core/shared_futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace wsync::bus {
namespace {

// The futex syscall takes the word's address; an atomic of it has the same size and representation.
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

std::uint32_t* address(const std::atomic<std::uint32_t>& word) {
  return const_cast<std::uint32_t*>(reinterpret_cast<const std::uint32_t*>(&word));
}

}  // namespace

FutexWait waitWhileEqual(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                         std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0)
    return word.load(std::memory_order_acquire) == expected ? FutexWait::TimedOut : FutexWait::Woken;
  timespec relative{};
  relative.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  relative.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  // FUTEX_WAIT without FUTEX_PRIVATE_FLAG: keyed by the physical page, so it works across processes.
  if (::syscall(SYS_futex, address(word), FUTEX_WAIT, expected, &relative, nullptr, 0) == 0) return FutexWait::Woken;
  switch (errno) {
    case EAGAIN:
      return FutexWait::Woken;  // the word had already changed
    case ETIMEDOUT:
      return FutexWait::TimedOut;
    case EINTR:
      return FutexWait::Interrupted;
    default:
      return FutexWait::Woken;  // EFAULT/EINVAL cannot happen for a valid word; let the caller re-check
  }
}

void wakeAll(const std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, address(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace wsync::bus
