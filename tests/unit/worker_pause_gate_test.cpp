// The pause gate between the agent's pause hook and an engine's step loop, with real threads: pause() returns only
// once the engine is quiesced for the mode (abort: in-flight ended; wait: in-flight drained, nothing admitted;
// keep: frozen mid-request), the engine takes no step while parked, resume() lets it go on, withdraw() takes back a
// pause the engine has not parked for, and close() frees both sides for good.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "wsync/worker_agent/pause_gate.hpp"

namespace wsync::worker_agent {
namespace {

using namespace std::chrono_literals;
using msg::PauseMode;

// Long enough that a loaded machine never fails a correct gate; a broken gate hangs, and this turns that into a
// failure instead of a stuck test.
constexpr auto kGenerous = 10s;

// A miniature engine: requests of `tokensPerRequest` tokens, `concurrency` in flight, honouring the gate as
// wsync-worker does. Its counters are written by the engine thread and read by the test only while the engine
// is parked or stopped (the gate orders those reads after the writes).
class MiniEngine {
 public:
  MiniEngine(PauseGate& gate, int concurrency, int tokensPerRequest)
      : gate_(gate), concurrency_(concurrency), tokensPerRequest_(tokensPerRequest) {
    thread_ = std::thread([this] { loop(); });
  }
  ~MiniEngine() { stop(); }

  void stop() {
    stop_.store(true);
    gate_.close();
    if (thread_.joinable()) thread_.join();
  }

  int inFlight = 0;
  int tokensOfFirstInFlight = 0;  // progress of the oldest in-flight request
  int finished = 0;
  int aborted = 0;
  std::atomic<std::uint64_t> steps{0};
  std::atomic<int> parks{0};
  std::uint64_t seenAfterResume = 0;  // `weights` as the engine read it after its last park
  std::uint64_t weights = 0;          // written by the test while the engine is parked

 private:
  void loop() {
    while (!stop_.load()) {
      if (const auto mode = gate_.requested()) {
        bool parkNow = true;
        if (*mode == PauseMode::Abort) {
          aborted += inFlight;
          inFlight = 0;
          tokensOfFirstInFlight = 0;
        } else if (*mode == PauseMode::Wait) {
          parkNow = inFlight == 0;
        }
        if (parkNow) {
          parks.fetch_add(1);
          if (!gate_.park()) return;
          seenAfterResume = weights;
          continue;
        }
      } else {
        inFlight = concurrency_;  // admit
      }
      // One decode step.
      std::this_thread::sleep_for(1ms);
      steps.fetch_add(1);
      if (++tokensOfFirstInFlight >= tokensPerRequest_) {
        finished += inFlight;
        inFlight = 0;
        tokensOfFirstInFlight = 0;
      }
    }
  }

  PauseGate& gate_;
  const int concurrency_;
  const int tokensPerRequest_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Runs gate.pause(mode) on another thread and says whether it returned in time.
bool pauseReturns(PauseGate& gate, PauseMode mode, std::chrono::milliseconds within = kGenerous) {
  auto pausing = std::async(std::launch::async, [&] { gate.pause(mode); });
  return pausing.wait_for(within) == std::future_status::ready;
}

void waitForSteps(const MiniEngine& engine, std::uint64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + kGenerous;
  while (engine.steps.load() < count && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_GE(engine.steps.load(), count);
}

TEST(PauseGate, NothingRequestedAtFirst) {
  PauseGate gate;
  EXPECT_FALSE(gate.requested().has_value());
  EXPECT_FALSE(gate.parked());
  EXPECT_FALSE(gate.closed());
}

TEST(PauseGate, PauseWaitsForTheEngineToPark) {
  PauseGate gate;
  auto pausing = std::async(std::launch::async, [&] { gate.pause(PauseMode::Keep); });
  // Nobody parks: pause() must still be waiting, with its request visible to the engine.
  EXPECT_EQ(pausing.wait_for(100ms), std::future_status::timeout);
  ASSERT_EQ(gate.requested(), PauseMode::Keep);
  auto parking = std::async(std::launch::async, [&] { return gate.park(); });
  ASSERT_EQ(pausing.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(gate.parked());
  EXPECT_EQ(parking.wait_for(50ms), std::future_status::timeout);  // parked until resumed
  gate.resume();
  ASSERT_EQ(parking.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(parking.get());
  EXPECT_FALSE(gate.requested().has_value());
  EXPECT_FALSE(gate.parked());
}

TEST(PauseGate, KeepFreezesInFlightRequests) {
  PauseGate gate;
  MiniEngine engine(gate, 4, 1'000'000);  // requests far longer than the test
  waitForSteps(engine, 5);
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Keep));
  EXPECT_TRUE(gate.parked());
  const std::uint64_t stepsAtPause = engine.steps.load();
  EXPECT_EQ(engine.inFlight, 4);  // frozen, not ended
  EXPECT_EQ(engine.aborted, 0);
  const int progress = engine.tokensOfFirstInFlight;
  EXPECT_GT(progress, 0);
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(engine.steps.load(), stepsAtPause) << "the engine stepped while parked";
  engine.weights = 42;  // the "new version", written while parked
  gate.resume();
  waitForSteps(engine, stepsAtPause + 3);
  engine.stop();
  EXPECT_EQ(engine.seenAfterResume, 42U);
  EXPECT_GT(engine.tokensOfFirstInFlight, progress);  // the same requests went on
  EXPECT_EQ(engine.aborted, 0);
}

TEST(PauseGate, WaitDrainsInFlightRequestsFirst) {
  PauseGate gate;
  MiniEngine engine(gate, 3, 40);
  waitForSteps(engine, 2);
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Wait));
  EXPECT_TRUE(gate.parked());
  EXPECT_EQ(engine.inFlight, 0);
  EXPECT_EQ(engine.aborted, 0);
  EXPECT_EQ(engine.finished % 3, 0);
  EXPECT_GE(engine.finished, 3);  // the requests in flight at the pause finished
  const int finishedAtPause = engine.finished;
  gate.resume();
  waitForSteps(engine, engine.steps.load() + 45);  // admits and finishes more after resuming
  engine.stop();
  EXPECT_GT(engine.finished, finishedAtPause);
}

TEST(PauseGate, AbortEndsInFlightRequestsNow) {
  PauseGate gate;
  MiniEngine engine(gate, 5, 1'000'000);
  waitForSteps(engine, 3);
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Abort));
  EXPECT_TRUE(gate.parked());
  EXPECT_EQ(engine.inFlight, 0);
  EXPECT_EQ(engine.aborted, 5);
  EXPECT_EQ(engine.finished, 0);
  gate.resume();
  waitForSteps(engine, engine.steps.load() + 3);
  engine.stop();
  EXPECT_EQ(engine.aborted + engine.inFlight, 10);  // new requests admitted after resuming
}

TEST(PauseGate, RepeatedRoundsEachParkOnce) {
  PauseGate gate;
  MiniEngine engine(gate, 2, 5);
  for (int round = 0; round < 20; ++round) {
    const auto mode = static_cast<PauseMode>(round % 3);
    ASSERT_TRUE(pauseReturns(gate, mode)) << "round " << round;
    EXPECT_TRUE(gate.parked());
    gate.resume();
  }
  engine.stop();
  EXPECT_EQ(engine.parks.load(), 20);
}

TEST(PauseGate, PauseWhileParkedReturnsAtOnce) {
  PauseGate gate;
  auto parking = std::async(std::launch::async, [&] { return gate.park(); });
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Wait));
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Abort, 1s));
  gate.resume();
  ASSERT_EQ(parking.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(parking.get());
}

TEST(PauseGate, CloseReleasesAWaitingPause) {
  PauseGate gate;
  auto pausing = std::async(std::launch::async, [&] { gate.pause(PauseMode::Wait); });
  EXPECT_EQ(pausing.wait_for(50ms), std::future_status::timeout);
  gate.close();
  ASSERT_EQ(pausing.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(gate.closed());
  EXPECT_FALSE(gate.requested().has_value());
  // From now on nothing waits: the engine is gone.
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Keep, 1s));
  EXPECT_FALSE(gate.park());
}

TEST(PauseGate, CloseReleasesAParkedEngine) {
  PauseGate gate;
  auto parking = std::async(std::launch::async, [&] { return gate.park(); });
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Keep));
  gate.close();
  ASSERT_EQ(parking.wait_for(kGenerous), std::future_status::ready);
  EXPECT_FALSE(parking.get());  // stopped, not resumed
}

TEST(PauseGate, APauseRightAfterResumeWaitsForANewPark) {
  PauseGate gate;
  std::atomic<int> parks{0};
  std::atomic<bool> stop{false};
  std::thread engine([&] {
    while (!stop.load()) {
      if (gate.requested()) {
        parks.fetch_add(1);
        if (!gate.park()) return;
      } else {
        std::this_thread::yield();
      }
    }
  });
  for (int round = 1; round <= 50; ++round) {
    ASSERT_TRUE(pauseReturns(gate, PauseMode::Keep)) << "round " << round;
    // Without a new park, a pause would return while the engine was already running again.
    EXPECT_EQ(parks.load(), round);
    gate.resume();  // and at once the next pause, before the engine thread has had a chance to run
  }
  stop.store(true);
  gate.close();
  engine.join();
}

TEST(PauseGate, AWithdrawnPauseReturnsFalseAndTheDrainingEngineGoesOn) {
  PauseGate gate;
  MiniEngine engine(gate, 2, 1'000'000);  // a drain far longer than the test
  waitForSteps(engine, 3);
  auto pausing = std::async(std::launch::async, [&] { return gate.pause(PauseMode::Wait); });
  EXPECT_EQ(pausing.wait_for(50ms), std::future_status::timeout);  // draining
  const std::uint64_t stepsWhileDraining = engine.steps.load();
  gate.withdraw();
  ASSERT_EQ(pausing.wait_for(kGenerous), std::future_status::ready);
  EXPECT_FALSE(pausing.get());
  EXPECT_FALSE(gate.requested().has_value());
  EXPECT_FALSE(gate.parked());
  waitForSteps(engine, stepsWhileDraining + 10);  // generating, never parked
  EXPECT_EQ(engine.parks.load(), 0);
  // The next pause is a pause like any other.
  ASSERT_TRUE(pauseReturns(gate, PauseMode::Keep));
  EXPECT_TRUE(gate.parked());
  EXPECT_EQ(engine.parks.load(), 1);
  gate.resume();
  engine.stop();
  EXPECT_EQ(engine.aborted, 0);
}

TEST(PauseGate, AWithdrawalAfterTheEngineParkedChangesNothing) {
  PauseGate gate;
  auto parking = std::async(std::launch::async, [&] {
    while (!gate.requested()) std::this_thread::sleep_for(1ms);
    return gate.park();
  });
  auto pausing = std::async(std::launch::async, [&] { return gate.pause(PauseMode::Keep); });
  ASSERT_EQ(pausing.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(pausing.get());
  gate.withdraw();
  EXPECT_TRUE(gate.parked());
  EXPECT_EQ(parking.wait_for(50ms), std::future_status::timeout);  // still parked: the agent resumes it
  gate.resume();
  ASSERT_EQ(parking.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(parking.get());
}

// The engine read the request, the pause was withdrawn, and only then does the engine park: nobody would resume it.
TEST(PauseGate, AnEngineThatParksForAWithdrawnPauseIsNotStranded) {
  PauseGate gate;
  auto pausing = std::async(std::launch::async, [&] { return gate.pause(PauseMode::Wait); });
  while (!gate.requested()) std::this_thread::sleep_for(1ms);  // the engine has seen the request
  gate.withdraw();
  ASSERT_EQ(pausing.wait_for(kGenerous), std::future_status::ready);
  EXPECT_FALSE(pausing.get());
  auto parking = std::async(std::launch::async, [&] { return gate.park(); });
  ASSERT_EQ(parking.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(parking.get());
  EXPECT_FALSE(gate.parked());
  // Seen once, the withdrawal is spent: a park of the engine's own waits for a resume as ever.
  EXPECT_FALSE(gate.requested().has_value());
  auto ownPark = std::async(std::launch::async, [&] { return gate.park(); });
  EXPECT_EQ(ownPark.wait_for(50ms), std::future_status::timeout);
  gate.resume();
  ASSERT_EQ(ownPark.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(ownPark.get());
}

// A new pause after a withdrawal the engine has not seen: the engine's park (for the old request it read) serves it.
TEST(PauseGate, APauseAfterAnUnseenWithdrawalIsServedByTheEnginesPark) {
  PauseGate gate;
  auto first = std::async(std::launch::async, [&] { return gate.pause(PauseMode::Wait); });
  while (!gate.requested()) std::this_thread::sleep_for(1ms);
  gate.withdraw();
  ASSERT_EQ(first.wait_for(kGenerous), std::future_status::ready);
  EXPECT_FALSE(first.get());
  auto second = std::async(std::launch::async, [&] { return gate.pause(PauseMode::Keep); });
  while (!gate.requested()) std::this_thread::sleep_for(1ms);
  auto parking = std::async(std::launch::async, [&] { return gate.park(); });
  ASSERT_EQ(second.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(second.get());
  EXPECT_TRUE(gate.parked());
  gate.resume();
  ASSERT_EQ(parking.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(parking.get());
}

TEST(PauseGate, WithdrawWithNothingRequestedDoesNothing) {
  PauseGate gate;
  gate.withdraw();
  EXPECT_FALSE(gate.requested().has_value());
  auto parking = std::async(std::launch::async, [&] { return gate.park(); });
  EXPECT_EQ(parking.wait_for(50ms), std::future_status::timeout);
  gate.close();
  ASSERT_EQ(parking.wait_for(kGenerous), std::future_status::ready);
  EXPECT_FALSE(parking.get());
}

}  // namespace
}  // namespace wsync::worker_agent
