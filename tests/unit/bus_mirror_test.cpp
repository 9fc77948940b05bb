// BusMirror, an agent's copy of the control block's bus words on another host (docs/hosts.md), against a plain
// EventPublisher standing in for the coordinator's event stream: it follows the beats, tells the coordinator of its
// Welcome from a replacement, and counts a coordinator whose beats stopped as gone.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "test_environment.hpp"
#include "wsync/bus/session/bus_mirror.hpp"
#include "wsync/bus/transport/event_publisher.hpp"

namespace wsync::bus {
namespace {

constexpr std::uint64_t kEpoch = 0x5eed;
constexpr std::uint64_t kOtherEpoch = 0xbeef;
// A subscription takes effect a little after connect (PUB/SUB): the test beats until the mirror has one.
constexpr std::chrono::seconds kPatience{10};
constexpr std::chrono::milliseconds kBeatEvery{20};

class BusMirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint_ = "ipc://" + test::useTemporaryRuntimeDirectory() + "/" + test::uniqueBusName("mirror") + ".events";
    auto publisher = EventPublisher::bind(context_, endpoint_);
    ASSERT_TRUE(publisher) << publisher.error().describe();
    publisher_.emplace(std::move(*publisher));
    auto mirror = BusMirror::start(context_, endpoint_, {});
    ASSERT_TRUE(mirror) << mirror.error().describe();
    mirror_ = std::move(*mirror);
  }

  void beat(std::uint64_t epoch, std::uint64_t committed, std::uint64_t round, msg::RoundPhase phase,
            PauseState pause = {}) {
    MessageBuilder builder;
    const auto body =
        msg::CreateCoordinatorBeat(builder.fbb(), committed, round, phase, 2, 1, pause.paused, pause.mode, pause.round);
    ASSERT_TRUE(publisher_->publish("bus/beat", builder, body, epoch));
  }

  // Beats until the mirror has taken `count` more beats than before.
  bool beatUntilTaken(std::uint64_t epoch, std::uint64_t committed, std::uint64_t round, msg::RoundPhase phase,
                      PauseState pause = {}) {
    const std::uint64_t before = mirror_->beats();
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      beat(epoch, committed, round, phase, pause);
      std::this_thread::sleep_for(kBeatEvery);
      if (mirror_->beats() > before) return true;
    }
    return false;
  }

  zmq::context_t context_{1};
  std::string endpoint_;
  std::optional<EventPublisher> publisher_;
  std::shared_ptr<BusMirror> mirror_;
};

TEST_F(BusMirrorTest, ASeedAnswersBeforeTheFirstBeat) {
  mirror_->seed(kEpoch, 7, PauseState{true, msg::PauseMode::Wait, 0});
  EXPECT_EQ(mirror_->committedVersion(), 7U);
  EXPECT_EQ(mirror_->pauseState(), (PauseState{true, msg::PauseMode::Wait, 0}));
  // No round known yet: round 0, which a transfer's probe takes as "behind", never as "over".
  ASSERT_TRUE(mirror_->roundState(kEpoch));
  EXPECT_EQ(mirror_->roundState(kEpoch)->round, 0U);
  EXPECT_TRUE(mirror_->coordinatorAlive(kEpoch, std::chrono::seconds(5)));
  EXPECT_FALSE(mirror_->coordinatorAlive(kOtherEpoch, std::chrono::seconds(5)));
}

TEST_F(BusMirrorTest, EachBeatReplacesTheWordsAsTheBlockHoldsThem) {
  mirror_->seed(kEpoch, 0, {});
  ASSERT_TRUE(beatUntilTaken(kEpoch, 3, 4, msg::RoundPhase::Transfer, PauseState{true, msg::PauseMode::Keep, 4}));
  EXPECT_EQ(mirror_->committedVersion(), 3U);
  EXPECT_EQ(mirror_->pauseState(), (PauseState{true, msg::PauseMode::Keep, 4}));
  EXPECT_EQ(mirror_->roundState(kEpoch), (RoundState{msg::RoundPhase::Transfer, 4}));

  ASSERT_TRUE(beatUntilTaken(kEpoch, 4, 4, msg::RoundPhase::Idle));
  EXPECT_EQ(mirror_->committedVersion(), 4U);
  EXPECT_FALSE(mirror_->pauseState().paused);
  EXPECT_EQ(mirror_->roundState(kEpoch), (RoundState{msg::RoundPhase::Idle, 4}));
}

TEST_F(BusMirrorTest, ABeatOfAnotherEpochMeansTheWelcomingCoordinatorIsGone) {
  mirror_->seed(kEpoch, 0, {});
  ASSERT_TRUE(beatUntilTaken(kEpoch, 1, 1, msg::RoundPhase::Transfer));
  EXPECT_TRUE(mirror_->coordinatorAlive(kEpoch, std::chrono::seconds(5)));
  ASSERT_TRUE(beatUntilTaken(kOtherEpoch, 1, 1, msg::RoundPhase::Idle));
  EXPECT_FALSE(mirror_->coordinatorAlive(kEpoch, std::chrono::seconds(5)));
  EXPECT_FALSE(mirror_->roundState(kEpoch).has_value());
  EXPECT_TRUE(mirror_->coordinatorAlive(kOtherEpoch, std::chrono::seconds(5)));
}

TEST_F(BusMirrorTest, ACoordinatorWhoseBeatsStopIsGoneAfterTheTimeout) {
  mirror_->seed(kEpoch, 0, {});
  ASSERT_TRUE(beatUntilTaken(kEpoch, 1, 1, msg::RoundPhase::Idle));
  constexpr std::chrono::milliseconds kTimeout{200};
  EXPECT_TRUE(mirror_->coordinatorAlive(kEpoch, kTimeout));
  std::this_thread::sleep_for(kTimeout + std::chrono::milliseconds(100));
  EXPECT_FALSE(mirror_->coordinatorAlive(kEpoch, kTimeout));
}

TEST_F(BusMirrorTest, ASeedNeverTakesTheCommittedVersionBack) {
  mirror_->seed(kEpoch, 0, {});
  ASSERT_TRUE(beatUntilTaken(kEpoch, 9, 9, msg::RoundPhase::Idle));
  mirror_->seed(kEpoch, 5, {});
  EXPECT_EQ(mirror_->committedVersion(), 9U);
}

}  // namespace
}  // namespace wsync::bus
