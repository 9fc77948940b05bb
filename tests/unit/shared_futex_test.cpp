// Cross-process futex: a waiter in another process is woken by a change of a word in shared memory, times out
// when nothing changes, and returns at once when the word already differs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "wsync/bus/core/shared_futex.hpp"

namespace wsync::bus {
namespace {

using namespace std::chrono_literals;

// The parent gives a woken child this long to exit; the child itself would sleep far longer without a wake, so a
// broken wake fails the test instead of passing late. Both are far above any scheduling delay.
constexpr auto kWakeTimeout = 20s;
constexpr auto kChildSleep = 120s;
constexpr auto kReapInterval = 5ms;

// A word in an anonymous shared mapping, as the control block and channel arenas provide.
struct SharedWord {
  SharedWord() {
    void* memory =
        ::mmap(nullptr, sizeof(std::atomic<std::uint32_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(memory, MAP_FAILED);
    word = new (memory) std::atomic<std::uint32_t>(0);
  }
  ~SharedWord() { ::munmap(word, sizeof(*word)); }
  std::atomic<std::uint32_t>* word;
};

TEST(SharedFutex, WakesAWaiterInAnotherProcess) {
  SharedWord shared;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Sleeps until the parent publishes 1; without a working wake it would sleep kChildSleep.
    while (shared.word->load() == 0) (void)waitWhileEqual(*shared.word, 0, kChildSleep);
    ::_exit(shared.word->load() == 1 ? 0 : 2);
  }
  std::this_thread::sleep_for(50ms);  // lets the child reach the futex, so that the wake is what ends its sleep
  shared.word->store(1, std::memory_order_release);
  wakeAll(*shared.word);

  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kWakeTimeout;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL() << "the waiting process was not woken";
    }
    std::this_thread::sleep_for(kReapInterval);
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(SharedFutex, TimesOutWhenNothingChanges) {
  SharedWord shared;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(waitWhileEqual(*shared.word, 0, 30ms), FutexWait::TimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 25ms);
}

TEST(SharedFutex, ReturnsAtOnceWhenTheWordAlreadyDiffers) {
  SharedWord shared;
  shared.word->store(5);
  EXPECT_EQ(waitWhileEqual(*shared.word, 4, kWakeTimeout), FutexWait::Woken);
  EXPECT_EQ(waitWhileEqual(*shared.word, 4, 0ns), FutexWait::Woken);
  EXPECT_EQ(waitWhileEqual(*shared.word, 5, 0ns), FutexWait::TimedOut);
}

}  // namespace
}  // namespace wsync::bus
