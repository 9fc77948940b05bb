// An agent on another host, as the coordinator sees it (docs/hosts.md): a client whose hello carries another host
// key than the coordinator's. It cannot write its control-block slot, so it reports it (SlotReport, on a connection
// of its own) and the coordinator writes it there; those reports alone keep it alive; a round on a channel that
// cannot cross hosts is refused before anyone pauses, naming it. Written from the schema alone (RawClient), so that
// it runs on one host; the rig of network namespaces (tests/hosts) runs the real programs on several.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "raw_client.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/core/host_identity.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::test {
namespace {

constexpr const char* kElsewhere = "boot-of-another-machine/shm:1.1/pid:1.1";
// Reports at the fixture's heartbeat interval, as a remote agent's heartbeat thread would.
constexpr std::chrono::milliseconds kReportEvery{100};
// Longer than the fixture's heartbeat timeout, with the liveness check's period on top.
constexpr std::chrono::milliseconds kWellPastTheTimeout = 3 * kTestHeartbeatTimeout;

// What a SlotReport says besides the agent's id and slot.
struct SlotClaim {
  msg::AgentState state = msg::AgentState::Idle;
  std::uint64_t transferRound = 0;
  std::uint64_t transferBytes = 0;
  std::uint64_t appliedVersion = 0;
  std::vector<std::uint8_t> secret{};  // the registration's (RawClient::secret()); empty: none
};

// A remote agent's heartbeat thread: SlotReports on a connection of their own until destroyed.
class SlotReporter {
 public:
  SlotReporter(zmq::context_t& context, const std::string& endpoint, std::string agentId, std::uint32_t slot,
               std::uint64_t epoch, SlotClaim claim)
      : thread_([&context, endpoint, agentId, slot, epoch, claim, this] {
          RawClient reports(context, endpoint, agentId + "/slot");
          bus::MessageBuilder builder;
          while (!stop_.load()) {
            builder.reset();
            auto& fbb = builder.fbb();
            const auto secret = claim.secret.empty() ? flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>>()
                                                     : fbb.CreateVector(claim.secret);
            reports.send(builder,
                         msg::CreateSlotReport(fbb, fbb.CreateString(agentId), slot, claim.appliedVersion, claim.state,
                                               claim.transferRound, claim.transferBytes, secret),
                         epoch);
            std::this_thread::sleep_for(kReportEvery);
          }
        }) {}
  ~SlotReporter() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::optional<bus::AgentSlotSnapshot> slotOf(const bus::ControlBlockView& block, const std::string& agentId) {
  for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
    auto snapshot = block.agentSlot(slot);
    if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active && snapshot->agentId == agentId) return snapshot;
  }
  return std::nullopt;
}

TEST_F(RoundFixture, AnAgentOnAnotherHostIsKeptAliveAndShownByTheSlotItReports) {
  startCoordinator({}, path("coordinator.log"));
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient far(context_, endpoints->requests, "far");
  far.sendHello({.agentId = "far", .hostKey = kElsewhere});
  const auto welcome = far.receive<msg::Welcome>(kPatience);
  ASSERT_TRUE(welcome);
  // The coordinator names its host, so that the agent knows it is elsewhere.
  ASSERT_NE(welcome->as<msg::Welcome>()->host_key(), nullptr);
  EXPECT_EQ(welcome->as<msg::Welcome>()->host_key()->str(), bus::thisHost().key);
  EXPECT_EQ(welcome->as<msg::Welcome>()->hostname()->str(), bus::thisHost().name);
  const std::uint32_t slot = welcome->as<msg::Welcome>()->slot();
  const std::uint64_t epoch = welcome->epoch();
  const auto* secret = welcome->as<msg::Welcome>()->registration_secret();
  ASSERT_NE(secret, nullptr);

  {
    SlotReporter reporter(context_, endpoints->requests, "far", slot, epoch,
                          {msg::AgentState::Receiving, 7, 12'345, 0, {secret->begin(), secret->end()}});
    // Nothing on its own connection but the hello: the reports alone keep it, well past the heartbeat timeout.
    std::this_thread::sleep_for(kWellPastTheTimeout);
    const auto shown = slotOf(*block_, "far");
    ASSERT_TRUE(shown) << "the agent was dropped although it reported its slot";
    EXPECT_TRUE(shown->agentAttached);
    EXPECT_EQ(shown->phase, bus::AgentPhase::Receiving);
    EXPECT_EQ(shown->transferRound, 7U);
    EXPECT_EQ(shown->transferBytes, 12'345U);
  }
  // Reports stop: dead within the heartbeat timeout (and a liveness pass).
  std::this_thread::sleep_for(kWellPastTheTimeout);
  EXPECT_FALSE(slotOf(*block_, "far")) << "an agent whose reports stopped is still registered";
  EXPECT_NE(readTextFile(path("coordinator.log")).find("on another host"), std::string::npos);
}

TEST_F(RoundFixture, ASlotReportThatMatchesNoRemoteRegistrationChangesNothing) {
  startCoordinator({}, path("coordinator.log"));
  auto worker = startWorker("w0");
  waitForAgents(1);
  const auto local = slotOf(*block_, "w0");
  ASSERT_TRUE(local);
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  {
    // A local agent writes its slot itself; nobody may write it for it.
    SlotReporter forger(context_, endpoints->requests, "w0", local->slot, block_->epoch(),
                        {msg::AgentState::Staged, 99, 1});
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const auto after = slotOf(*block_, "w0");
  ASSERT_TRUE(after);
  EXPECT_NE(after->phase, bus::AgentPhase::Staged);
  EXPECT_NE(after->transferRound, 99U);
  EXPECT_NE(readTextFile(path("coordinator.log")).find("dropped a SlotReport for 'w0'"), std::string::npos);
}

TEST_F(RoundFixture, AnShmRoundWithAWorkerOnAnotherHostIsRefusedBeforeAnyonePausesNamingIt) {
  startCoordinator({}, path("coordinator.log"));
  auto worker = startWorker("w0");
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient far(context_, endpoints->requests, "far");
  const auto epoch = far.registerAs({.agentId = "far", .hostKey = kElsewhere}, kPatience);
  ASSERT_TRUE(epoch);
  const auto shown = slotOf(*block_, "far");
  ASSERT_TRUE(shown);
  SlotReporter reporter(context_, endpoints->requests, "far", shown->slot, *epoch,
                        {msg::AgentState::Idle, 0, 0, 0, far.secret()});
  waitForAgents(2);

  auto trainer = startTrainer("t0", {"--steps", "1"}, path("trainer.log"));
  trainer.wait(kPatience);
  const std::string log = readTextFile(path("trainer.log"));
  EXPECT_NE(log.find("channel shm needs every agent on the coordinator's host"), std::string::npos) << log;
  EXPECT_NE(log.find("worker 'far'"), std::string::npos) << log;
  // Refused at BeginUpdate: no worker was asked to pause, so no engine stopped for a round that could not run.
  EXPECT_FALSE(far.receive<msg::Pause>(std::chrono::milliseconds(500)));
  EXPECT_EQ(block_->roundState().round, 0U);
}

// Anyone may learn a remote agent's id, slot and epoch (a snapshot lists them): a report without the registration's
// secret speaks for nobody. Forged reports neither keep a dead remote agent registered nor write its slot.
TEST_F(RoundFixture, ForgedSlotReportsNeitherKeepADeadRemoteAgentNorWriteItsSlot) {
  startCoordinator({}, path("coordinator.log"));
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient far(context_, endpoints->requests, "far");
  const auto epoch = far.registerAs({.agentId = "far", .hostKey = kElsewhere}, kPatience);
  ASSERT_TRUE(epoch);
  const auto shown = slotOf(*block_, "far");
  ASSERT_TRUE(shown);
  std::vector<std::uint8_t> wrongSecret = far.secret();
  ASSERT_EQ(wrongSecret.size(), 16U);
  wrongSecret[0] ^= 1;
  {
    // The agent itself is silent (dead); two forgers speak for it, one without a secret, one with a wrong one.
    SlotReporter without(context_, endpoints->requests, "far", shown->slot, *epoch,
                         {msg::AgentState::Staged, 99, 1, 999});
    SlotReporter wrong(context_, endpoints->requests, "far", shown->slot, *epoch,
                       {msg::AgentState::Staged, 99, 1, 999, wrongSecret});
    std::this_thread::sleep_for(kWellPastTheTimeout);
    const auto after = slotOf(*block_, "far");
    EXPECT_FALSE(after) << "forged reports kept a silent remote agent registered";
    if (after) {
      EXPECT_NE(after->appliedVersion, 999U);
      EXPECT_NE(after->phase, bus::AgentPhase::Staged);
    }
  }
  const std::string log = readTextFile(path("coordinator.log"));
  EXPECT_NE(log.find("dropped a SlotReport for 'far': it lacks the registration's secret"), std::string::npos) << log;
}

// The holder's own reports go on being taken, alongside forged ones that are not.
TEST_F(RoundFixture, OnlyTheHoldersReportsWriteARemoteAgentsSlot) {
  startCoordinator({}, path("coordinator.log"));
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient far(context_, endpoints->requests, "far");
  const auto epoch = far.registerAs({.agentId = "far", .hostKey = kElsewhere}, kPatience);
  ASSERT_TRUE(epoch);
  const auto shown = slotOf(*block_, "far");
  ASSERT_TRUE(shown);
  SlotReporter holder(context_, endpoints->requests, "far", shown->slot, *epoch,
                      {msg::AgentState::Idle, 0, 0, 0, far.secret()});
  SlotReporter forger(context_, endpoints->requests, "far", shown->slot, *epoch, {msg::AgentState::Staged, 99, 1, 999});
  std::this_thread::sleep_for(kWellPastTheTimeout);
  const auto after = slotOf(*block_, "far");
  ASSERT_TRUE(after) << "the holder's reports did not keep it registered";
  EXPECT_EQ(after->appliedVersion, 0U);
  EXPECT_EQ(after->phase, bus::AgentPhase::Idle);
  EXPECT_EQ(after->transferRound, 0U);
}

}  // namespace
}  // namespace wsync::test
