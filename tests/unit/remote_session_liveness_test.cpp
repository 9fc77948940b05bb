// An agent on another host lives by the coordinator's beats (its bus mirror, docs/hosts.md): when they stop reaching
// it, or come from another coordinator, its control connection may still look alive, yet every transfer's cancel
// probe takes the coordinator for gone. The session then registers again, with a new subscription, within about a
// heartbeat timeout. A stand-in coordinator written from the schema (a ROUTER and a PUB on the bus's endpoints)
// welcomes the session as an agent of another host and controls what its event stream says.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "test_environment.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/event_publisher.hpp"
#include "wsync/bus/transport/router_endpoint.hpp"

namespace wsync::bus {
namespace {

constexpr std::uint64_t kEpoch = 0x5eed;
constexpr std::uint64_t kOtherEpoch = 0xbeef;
constexpr std::chrono::milliseconds kHeartbeatInterval{50};
constexpr std::chrono::milliseconds kHeartbeatTimeout{500};
// Far above a heartbeat timeout: only a session that never registers again gets near it.
constexpr std::chrono::seconds kPatience{20};
// A host key that is not this one's: the session takes the stand-in for a coordinator on another host.
constexpr const char* kElsewhere = "boot-of-another-machine/shm:1.1/pid:1.1";

// The stand-in coordinator: answers every hello with a Welcome and counts them; beats while `beating` holds, with
// the epoch `beatEpoch` names.
class StandInCoordinator {
 public:
  explicit StandInCoordinator(const std::string& bus) {
    const auto endpoints = resolveEndpoints(bus);
    EXPECT_TRUE(endpoints);
    auto router = RouterEndpoint::bind(context_, endpoints->requests);
    EXPECT_TRUE(router) << router.error().describe();
    router_.emplace(std::move(*router));
    auto events = EventPublisher::bind(context_, endpoints->events);
    EXPECT_TRUE(events) << events.error().describe();
    events_.emplace(std::move(*events));
    thread_ = std::thread([this] { run(); });
  }
  ~StandInCoordinator() {
    stop_.store(true);
    thread_.join();
  }

  std::atomic<bool> beating{true};
  std::atomic<std::uint64_t> beatEpoch{kEpoch};
  std::uint32_t hellos() const { return hellos_.load(); }

 private:
  void run() {
    auto nextBeat = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      if (std::chrono::steady_clock::now() >= nextBeat) {
        nextBeat += kHeartbeatInterval;
        if (beating.load()) {
          MessageBuilder builder;
          const auto beat = msg::CreateCoordinatorBeat(builder.fbb(), 0, 0, msg::RoundPhase::Idle, 1, 1);
          (void)events_->publish("bus/beat", builder, beat, beatEpoch.load());
        }
      }
      auto received = router_->receive(std::chrono::milliseconds(10));
      if (!received || !*received || !(*received)->message) continue;
      const auto& delivery = **received;
      const auto* hello = delivery.message->as<msg::AgentHello>();
      if (hello == nullptr) continue;  // heartbeats, slot reports
      ++hellos_;
      MessageBuilder builder;
      auto& fbb = builder.fbb();
      const msg::Digest128 digest;
      const auto welcome = msg::CreateWelcome(
          fbb, fbb.CreateString(hello->agent_id()->str()), 0, 0, 1, kEpoch, 0,
          static_cast<std::uint32_t>(kHeartbeatInterval.count()), static_cast<std::uint32_t>(kHeartbeatTimeout.count()),
          fbb.CreateString("unused"), 0, &digest, 1000, 1000, 0, false, msg::PauseMode::Keep,
          fbb.CreateString(kElsewhere), fbb.CreateString("elsewhere"));
      (void)router_->send(delivery.source, builder.finish(welcome, EnvelopeStamp{kEpoch, 0}));
    }
  }

  zmq::context_t context_{1};
  std::optional<RouterEndpoint> router_;
  std::optional<EventPublisher> events_;
  std::atomic<std::uint32_t> hellos_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class RemoteSessionLivenessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)test::useTemporaryRuntimeDirectory();
    bus_ = test::uniqueBusName("remote-liveness");
    coordinator_.emplace(bus_);
    SessionOptions options;
    options.bus = bus_;
    options.agentId = "far-worker";
    options.role = msg::Role::Worker;
    auto session = AgentSession::open(context_, options);
    ASSERT_TRUE(session) << session.error().describe();
    session_ = std::move(*session);
    auto registration = session_->registerAgent(0);
    ASSERT_TRUE(registration) << registration.error().describe();
    ASSERT_TRUE(session_->remote());
  }

  // Runs the session's loop until the stand-in has seen `hellos` hellos in all; false if it never did.
  bool runUntilHellos(std::uint32_t hellos) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (coordinator_->hellos() < hellos && std::chrono::steady_clock::now() < deadline) {
      auto delivery = session_->next(std::chrono::milliseconds(20));
      EXPECT_TRUE(delivery);
    }
    return coordinator_->hellos() >= hellos;
  }

  zmq::context_t context_{1};
  std::string bus_;
  std::optional<StandInCoordinator> coordinator_;
  std::unique_ptr<AgentSession> session_;
};

TEST_F(RemoteSessionLivenessTest, BeatsThatKeepComingKeepTheRegistration) {
  // Four heartbeat timeouts of beats: no new hello.
  const auto until = std::chrono::steady_clock::now() + 4 * kHeartbeatTimeout;
  while (std::chrono::steady_clock::now() < until) ASSERT_TRUE(session_->next(std::chrono::milliseconds(20)));
  EXPECT_EQ(coordinator_->hellos(), 1U);
}

TEST_F(RemoteSessionLivenessTest, ASilentEventStreamMakesTheSessionRegisterAgain) {
  ASSERT_TRUE(runUntilHellos(1));
  coordinator_->beating.store(false);
  EXPECT_TRUE(runUntilHellos(2)) << "the session kept a registration whose coordinator's beats stopped";
  // Beats again: the new registration holds.
  coordinator_->beating.store(true);
  const std::uint32_t settled = coordinator_->hellos() + 1;  // one more may be under way as the beats resume
  const auto until = std::chrono::steady_clock::now() + 4 * kHeartbeatTimeout;
  while (std::chrono::steady_clock::now() < until) ASSERT_TRUE(session_->next(std::chrono::milliseconds(20)));
  EXPECT_LE(coordinator_->hellos(), settled);
  EXPECT_TRUE(session_->registered());
}

TEST_F(RemoteSessionLivenessTest, BeatsOfAnotherCoordinatorMakeTheSessionRegisterAgain) {
  coordinator_->beatEpoch.store(kOtherEpoch);
  EXPECT_TRUE(runUntilHellos(2)) << "the session kept a registration while another coordinator's beats came";
}

}  // namespace
}  // namespace wsync::bus
