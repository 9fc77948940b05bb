// BlockingCallGuard: a blocking call that outlives its stall timeout, its deadline or a cancel is ended by aborting
// its communicator; a call that returns by itself never is, nor is anything outside a call or outside watch().
// The "communicator" here is a latch: the blocking call waits on it, the guard's abort opens it, as ncclCommAbort
// ends a blocking NCCL call.
#include "wsync/bus/channel/nccl/blocking_call_guard.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace wsync::bus::gpu {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Bounds a call the guard must end: far above the limits the cases set, so only a guard that never fires hits it.
constexpr auto kHangBound = 10s;
// A deadline and a stall timeout that no case reaches.
constexpr auto kFar = 1h;

// A blocking call into a communicator that only an abort ends.
class Latch {
 public:
  void abort() {
    aborts_.fetch_add(1);
    opened_.set_value();
  }
  // The blocking call: true if an abort ended it, false if it gave up after kHangBound.
  bool block() { return opened_future_.wait_for(kHangBound) == std::future_status::ready; }
  int aborts() const { return aborts_.load(); }

 private:
  std::promise<void> opened_;
  std::shared_future<void> opened_future_{opened_.get_future().share()};
  std::atomic<int> aborts_{0};
};

TEST(BlockingCallGuard, ACallThatReturnsByItselfIsNeverAborted) {
  Latch latch;
  BlockingCallGuard guard([&] { latch.abort(); });
  guard.watch(Clock::now() + kFar, 200ms, nullptr);
  for (int call = 0; call < 100; ++call) {
    ASSERT_TRUE(guard.enter("quickCall"));
    std::this_thread::sleep_for(100us);
    EXPECT_FALSE(guard.leave().has_value());
  }
  guard.unwatch();
  EXPECT_EQ(latch.aborts(), 0);
  EXPECT_FALSE(guard.fired());
}

TEST(BlockingCallGuard, ACallThatMakesNoProgressIsAbortedAsATimeoutAndNoLaterCallIsMade) {
  Latch latch;
  BlockingCallGuard guard([&] { latch.abort(); });
  guard.watch(Clock::now() + kFar, 50ms, nullptr);
  ASSERT_TRUE(guard.enter("ncclBroadcast"));
  const auto started = Clock::now();
  ASSERT_TRUE(latch.block()) << "the guard never aborted the stalled call";
  EXPECT_GE(Clock::now() - started, 50ms);
  const auto failure = guard.leave();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->code, ChannelError::Timeout);
  EXPECT_NE(failure->detail.find("ncclBroadcast made no progress for 50 ms"), std::string::npos) << failure->detail;
  EXPECT_TRUE(guard.fired());
  EXPECT_FALSE(guard.enter("ncclBroadcast")) << "a call on the aborted communicator";
  guard.unwatch();
  EXPECT_EQ(latch.aborts(), 1);
}

TEST(BlockingCallGuard, ACancelEndsTheCallAsAborted) {
  Latch latch;
  BlockingCallGuard guard([&] { latch.abort(); });
  std::atomic<bool> cancelled{false};
  const std::function<bool()> cancel = [&] { return cancelled.load(); };
  guard.watch(Clock::now() + kFar, kFar, &cancel);
  ASSERT_TRUE(guard.enter("ncclBroadcast"));
  std::thread canceller([&] {
    std::this_thread::sleep_for(20ms);
    cancelled = true;
  });
  ASSERT_TRUE(latch.block()) << "the guard never saw the cancel";
  canceller.join();
  const auto failure = guard.leave();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->code, ChannelError::Aborted);
  EXPECT_EQ(failure->detail, "cancelled in ncclBroadcast");
  guard.unwatch();
}

TEST(BlockingCallGuard, ThePassedDeadlineEndsTheCallAsATimeout) {
  Latch latch;
  BlockingCallGuard guard([&] { latch.abort(); });
  guard.watch(Clock::now() + 30ms, kFar, nullptr);
  ASSERT_TRUE(guard.enter("ncclBroadcast"));
  ASSERT_TRUE(latch.block()) << "the guard never saw the deadline pass";
  const auto failure = guard.leave();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->code, ChannelError::Timeout);
  EXPECT_EQ(failure->detail, "ncclBroadcast did not complete in time");
  guard.unwatch();
}

// Between calls the transfer thread makes its own checks (its events, NCCL's error, the probe): the guard must not
// abort a communicator nobody is blocked in, nor look while nothing is watched.
TEST(BlockingCallGuard, NothingIsAbortedBetweenCallsOrWhileUnwatched) {
  Latch latch;
  BlockingCallGuard guard([&] { latch.abort(); });
  const std::function<bool()> cancel = [] { return true; };
  guard.watch(Clock::now() - 1s, 1ms, &cancel);  // every limit already passed
  std::this_thread::sleep_for(30ms);
  guard.unwatch();
  ASSERT_TRUE(guard.enter("unwatchedCall"));
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(guard.leave().has_value());
  EXPECT_EQ(latch.aborts(), 0);
}

// The guard judging one call must never abort the next: each call either returns by itself (and its leave() says
// so) or is aborted (and its leave() returns the reason, once the abort is done), never both, never neither.
TEST(BlockingCallGuard, EveryCallEitherReturnsOrIsAbortedNeverBoth) {
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> aborts{0};
    std::atomic<bool> inCall{false};
    std::atomic<bool> abortedOutsideACall{false};
    BlockingCallGuard guard([&] {
      if (!inCall.load()) abortedOutsideACall = true;
      aborts.fetch_add(1);
    });
    guard.watch(Clock::now() + kFar, 0ms, nullptr);  // any call the guard sees has stalled
    int failures = 0;
    for (int call = 0; call < 50 && failures == 0; ++call) {
      inCall = true;
      if (!guard.enter("raceCall")) break;
      const auto until = Clock::now() + std::chrono::microseconds(call % 7 * 50);
      while (Clock::now() < until) {}
      // The call is over once it has left: an abort after this point is a bug, and ends this loop first.
      const auto failure = guard.leave();
      inCall = false;
      if (failure) ++failures;
    }
    guard.unwatch();
    EXPECT_EQ(aborts.load(), failures) << "round " << round;
    EXPECT_FALSE(abortedOutsideACall.load()) << "round " << round;
  }
}

}  // namespace
}  // namespace wsync::bus::gpu
