// The pause watch (worker_agent/src/pause_watch.hpp) over a bus view the test writes: it withdraws a pause once the
// word is clear and was seen held, or is clear naming the pause's round or a later one, and an operator's pause once
// the word, seen held in its mode, is held in another; never while the word is held for that pause or for another in
// the same mode, nor on a clear word of an earlier round (a mirror that has not heard of it yet).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "pause_watch.hpp"

namespace wsync::worker_agent::detail {
namespace {

using namespace std::chrono_literals;

// Several watch intervals: time for the watch to have looked more than once.
constexpr auto kSeveralLooks = kPauseWatchInterval * 8;
// Only a broken watch needs this long.
constexpr auto kGenerous = 10s;

class WrittenView : public bus::BusView {
 public:
  std::uint64_t committedVersion() const override { return 0; }
  bus::PauseState pauseState() const override { return bus::unpackPause(word_.load()); }
  void set(const bus::PauseState& state) { word_.store(bus::packPause(state)); }

 private:
  std::atomic<std::uint64_t> word_{0};
};

struct Watched {
  std::shared_ptr<WrittenView> view = std::make_shared<WrittenView>();
  std::atomic<int> withdrawals{0};

  bool withdrawnWithin(std::chrono::milliseconds patience) const {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (withdrawals.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    return withdrawals.load() > 0;
  }
};

TEST(PauseWatch, ARoundsPauseClearedAfterBeingSeenIsWithdrawnOnce) {
  Watched watched;
  watched.view->set({true, msg::PauseMode::Wait, 5});
  PauseWatch watch(watched.view, 5, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_EQ(watched.withdrawals.load(), 0) << "withdrawn while held";
  watched.view->set({false, msg::PauseMode::Wait, 5});
  EXPECT_TRUE(watched.withdrawnWithin(kGenerous));
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_TRUE(watch.stop());
  EXPECT_EQ(watched.withdrawals.load(), 1);
}

TEST(PauseWatch, AClearWordNamingTheRoundOrALaterOneIsWithdrawnUnseen) {
  for (const std::uint64_t wordRound : {5U, 6U}) {
    Watched watched;
    watched.view->set({false, msg::PauseMode::Keep, wordRound});  // the round ended before the watch looked
    PauseWatch watch(watched.view, 5, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
    EXPECT_TRUE(watched.withdrawnWithin(kGenerous)) << "word of round " << wordRound;
    EXPECT_TRUE(watch.stop());
  }
}

TEST(PauseWatch, AMirrorThatHasNotHeardOfThePauseWithdrawsNothing) {
  Watched watched;
  watched.view->set({false, msg::PauseMode::Keep, 4});  // the previous round's end, not this pause's
  PauseWatch watch(watched.view, 5, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_FALSE(watch.stop());
  EXPECT_EQ(watched.withdrawals.load(), 0);
}

TEST(PauseWatch, AWordHeldForAnotherPauseKeepsTheEngineQuiescing) {
  Watched watched;
  watched.view->set({true, msg::PauseMode::Wait, 5});
  PauseWatch watch(watched.view, 5, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
  std::this_thread::sleep_for(kSeveralLooks);
  watched.view->set({true, msg::PauseMode::Keep, 6});  // round 5 ended and round 6 began between two looks
  std::this_thread::sleep_for(kSeveralLooks);
  watched.view->set({true, msg::PauseMode::Abort, 0});  // an operator's pause holds
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_FALSE(watch.stop());
  EXPECT_EQ(watched.withdrawals.load(), 0);
}

TEST(PauseWatch, AnOperatorsPauseLiftedIsWithdrawn) {
  Watched watched;
  watched.view->set({false, msg::PauseMode::Keep, 3});  // an old round's end says nothing of an operator's pause
  PauseWatch watch(watched.view, 0, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_EQ(watched.withdrawals.load(), 0);
  watched.view->set({true, msg::PauseMode::Wait, 0});
  std::this_thread::sleep_for(kSeveralLooks);
  watched.view->set({false, msg::PauseMode::Wait, 3});
  EXPECT_TRUE(watched.withdrawnWithin(kGenerous));
  EXPECT_TRUE(watch.stop());
}

// The operator resumed and a round paused in another mode between two looks (2026-11-29: the trainer's round began
// 6 ms after the resume, and the watch never saw the word clear): the operator's pause is over all the same.
TEST(PauseWatch, AnOperatorsPauseReplacedByARoundsPauseOfAnotherModeIsWithdrawn) {
  Watched watched;
  watched.view->set({true, msg::PauseMode::Wait, 0});
  PauseWatch watch(watched.view, 0, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_EQ(watched.withdrawals.load(), 0);
  watched.view->set({true, msg::PauseMode::Keep, 1});
  EXPECT_TRUE(watched.withdrawnWithin(kGenerous));
  EXPECT_TRUE(watch.stop());
  EXPECT_EQ(watched.withdrawals.load(), 1);
}

// While an operator's pause holds, the word keeps its mode through any round: the engine keeps quiescing. So it does
// for a mirror whose first word was another pause's, in another mode, until it shows the operator's.
TEST(PauseWatch, AnOperatorsPauseHeldThroughARoundKeepsTheEngineQuiescing) {
  Watched watched;
  watched.view->set({true, msg::PauseMode::Keep, 2});  // a mirror still showing round 2's pause
  PauseWatch watch(watched.view, 0, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
  std::this_thread::sleep_for(kSeveralLooks);
  watched.view->set({true, msg::PauseMode::Wait, 0});  // the operator's
  std::this_thread::sleep_for(kSeveralLooks);
  watched.view->set({true, msg::PauseMode::Wait, 3});  // round 3 began while the operator's pause holds
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_FALSE(watch.stop());
  EXPECT_EQ(watched.withdrawals.load(), 0);
}

TEST(PauseWatch, StoppingEndsTheWatchAtOnce) {
  Watched watched;
  watched.view->set({true, msg::PauseMode::Wait, 5});
  const auto started = std::chrono::steady_clock::now();
  {
    PauseWatch watch(watched.view, 5, msg::PauseMode::Wait, [&] { watched.withdrawals.fetch_add(1); });
    EXPECT_FALSE(watch.stop());
    EXPECT_FALSE(watch.stop());  // twice is harmless, and so is the destructor after
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, kGenerous);
  watched.view->set({false, msg::PauseMode::Wait, 5});
  std::this_thread::sleep_for(kSeveralLooks);
  EXPECT_EQ(watched.withdrawals.load(), 0);
}

}  // namespace
}  // namespace wsync::worker_agent::detail
