// Agents on other hosts than the coordinator's (docs/hosts.md), with the real programs on the rig: a worker on "w1"
// and a trainer on "train" register with the coordinator on "coord" over tcp with CURVE, although neither can map
// its control block; they stay registered on their slot reports, and the operator on "ops" sees them as the
// coordinator's host would. A round on a channel that cannot cross hosts is refused before anyone pauses, naming
// who is where. A pause called off while a worker on another host drains is withdrawn from its engine. The trainer's
// tcp listener is bound to its own address on the rig's network, and a worker killed mid-transfer is named by its
// agent id in the trainer's report.
#include <csignal>
#include <thread>

#include "bus_rig_fixture.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

// Longer than the fixture's heartbeat timeout (1 s) several times over: an agent still registered after it lives
// on its reports.
constexpr std::chrono::milliseconds kWellPastTheHeartbeatTimeout{4000};

TEST_F(BusRigFixture, WorkersOnOtherHostsRegisterStayAliveAndShowTheirState) {
  startCoordinator();
  startWorker("w1", "w1");
  startWorker("w2", "w2");
  ASSERT_TRUE(waitForAgents(2)) << log("coordinator");
  std::this_thread::sleep_for(kWellPastTheHeartbeatTimeout);
  const auto state = status();
  for (const std::string id : {"w1", "w2"}) {
    const auto agent = agentIn(state, id);
    ASSERT_FALSE(agent.is_null()) << id << " was dropped: " << state.dump() << "\n" << log("coordinator");
    EXPECT_EQ(agent["state"], "idle") << agent.dump();
    EXPECT_LT(agent["heartbeat_age_ms"].get<int>(), 1000) << agent.dump();
    EXPECT_NE(log(id).find("registered with the coordinator on coord (another host"), std::string::npos) << log(id);
  }
  EXPECT_NE(log("coordinator").find("Worker 'w1' joined (rank"), std::string::npos);
  EXPECT_NE(log("coordinator").find("on another host: 'w1'"), std::string::npos) << log("coordinator");
  EXPECT_EQ(log("coordinator").find("dropped a SlotReport"), std::string::npos) << log("coordinator");
}

TEST_F(BusRigFixture, AnShmRoundAcrossHostsIsRefusedBeforeAnyonePausesNamingWhoIsWhere) {
  startCoordinator();
  startWorker("w1", "w1");
  ASSERT_TRUE(waitForAgents(1));
  auto& trainer = startTrainer("t0", {"--steps", "1", "--channel", "shm"});
  trainer.wait(kPatience);
  const std::string said = log("t0");
  EXPECT_NE(said.find("channel shm needs every agent on the coordinator's host ('coord'"), std::string::npos) << said;
  EXPECT_NE(said.find("trainer 't0' on host 'train'"), std::string::npos) << said;
  EXPECT_NE(said.find("worker 'w1' on host 'w1'"), std::string::npos) << said;
  // Nobody paused: the worker never heard of a round, and the bus never left Idle.
  EXPECT_EQ(log("w1").find("pause"), std::string::npos) << log("w1");
  const auto state = status();
  EXPECT_EQ(state["round"], 0) << state.dump();
  EXPECT_EQ(state["committed_version"], 0);
}

// Rounds across hosts on the tcp channel: the trainer on "train" publishes to workers on "w1" and "w2"; every
// version commits and both workers end with the trainer's bytes.
TEST_F(BusRigFixture, RoundsCommitWithTheTrainerAndTheWorkersOnHostsOfTheirOwn) {
  startCoordinator({"--bucket-mib", "1"});
  const std::vector<std::string> flags{"--model", "synthetic:8:4", "--channel", "tcp"};
  startWorker("w1", "w1", flags);
  startWorker("w2", "w2", flags);
  ASSERT_TRUE(waitForAgents(2));
  auto trainerFlags = flags;
  trainerFlags.insert(trainerFlags.end(), {"--steps", "3"});
  auto& trainer = startTrainer("t0", trainerFlags);
  EXPECT_EQ(trainer.wait(kPatience), 0) << log("t0");
  EXPECT_EQ(status()["committed_version"], 3) << log("coordinator");
  const std::string sent = readTextFile(path("t0.safetensors"));
  ASSERT_FALSE(sent.empty()) << log("t0");
  for (const std::string id : {"w1", "w2"}) {
    agents_.at(id).signal(SIGTERM);
    EXPECT_EQ(agents_.at(id).wait(kPatience), 0) << log(id);
    EXPECT_TRUE(sent == readTextFile(path(id + ".safetensors"))) << id << " does not hold version 3 byte for byte";
  }
}

// A worker on another host killed mid-transfer: its connection closes with it, and the trainer's channel reports
// that within a poll slice, long before the coordinator can tell the worker is dead (its heartbeat timeout, 1 s),
// so the round aborts in the trainer's name, which names the lost receiver by the agent id of its hello. The
// trainer's listener is bound to the trainer's address on the rig's network (its route to the coordinator).
TEST_F(BusRigFixture, AWorkerOnAnotherHostKilledMidTransferIsNamedByItsAgentIdInTheTrainersReport) {
  startCoordinator({"--bucket-mib", "1", "--pause-timeout-ms", "4000"});
  const std::vector<std::string> flags{"--model", "synthetic:8:4", "--channel", "tcp"};
  startWorker("w1", "w1", flags);
  auto doomedFlags = flags;
  doomedFlags.insert(doomedFlags.end(), {"--fault", "kill@transfer:2"});
  auto& doomed = startWorker("w2", "w2", doomedFlags);
  ASSERT_TRUE(waitForAgents(2));
  auto trainerFlags = flags;
  trainerFlags.insert(trainerFlags.end(), {"--steps", "3"});
  auto& trainer = startTrainer("t0", trainerFlags);
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL) << log("w2");
  EXPECT_EQ(trainer.wait(kPatience), 4) << "one step is aborted: " << log("t0");
  const std::string trainerLog = log("t0");
  EXPECT_NE(trainerLog.find("tcp payload listener bound to " + rig_->address("train") + ":"), std::string::npos)
      << trainerLog;
  EXPECT_NE(trainerLog.find("version 2 aborted: ChannelFailure: trainer 't0' failed the transfer: a peer is gone: "
                            "receiver 'w2' (index "),
            std::string::npos)
      << trainerLog;
}

// A frontier MoE's tensor count across hosts (issue 18): the manifest of 100,000 tensors (some MB) goes over the
// bus's CURVE-encrypted tcp link to a worker on another host, which checks every entry against its bindings, and
// the tensors over the tcp channel; both versions commit and the worker ends with the trainer's bytes.
TEST_F(BusRigFixture, AHundredThousandTensorsCommitOnAWorkerOnAnotherHost) {
  startCoordinator({"--bucket-mib", "16"});
  const std::vector<std::string> flags{"--model", "synthetic:100000:64", "--channel", "tcp"};
  startWorker("w1", "w1", flags);
  ASSERT_TRUE(waitForAgents(1));
  auto trainerFlags = flags;
  trainerFlags.insert(trainerFlags.end(), {"--steps", "2"});
  auto& trainer = startTrainer("t0", trainerFlags);
  EXPECT_EQ(trainer.wait(kPatience), 0) << log("t0");
  EXPECT_EQ(status()["committed_version"], 2) << log("coordinator");
  const std::string sent = readTextFile(path("t0.safetensors"));
  ASSERT_FALSE(sent.empty()) << log("t0");
  agents_.at("w1").signal(SIGTERM);
  EXPECT_EQ(agents_.at("w1").wait(kPatience), 0) << log("w1");
  EXPECT_TRUE(sent == readTextFile(path("w1.safetensors"))) << "w1 does not hold version 2 byte for byte";
}

// A round aborted while a worker on another host still drains its engine (`wait` mode, past the pause timeout): the
// worker learns it from the mirror of the coordinator's beats, not from a message it cannot read until the drain
// ends, so its engine goes back to generating and it takes the next round.
TEST_F(BusRigFixture, ARoundAbortedWhileAWorkerOnAnotherHostDrainsWithdrawsItsPause) {
  startCoordinator({"--pause-timeout-ms", "1500"});
  startWorker("w1", "w1", {"--channel", "tcp", "--tokens", "1000000", "--concurrency", "1"});
  ASSERT_TRUE(waitForAgents(1));
  auto& waiting = startTrainer("t0", {"--channel", "tcp", "--steps", "1", "--pause-mode", "wait"});
  EXPECT_EQ(waiting.wait(kPatience), 4) << log("t0");
  EXPECT_NE(log("t0").find("Timeout"), std::string::npos) << log("t0");
  auto& keeping = startTrainer("t1", {"--channel", "tcp", "--steps", "1", "--pause-mode", "keep"});
  EXPECT_EQ(keeping.wait(kPatience), 0) << log("t1") << log("w1");
  EXPECT_EQ(status()["committed_version"], 1) << log("coordinator");
  EXPECT_NE(log("w1").find("the bus withdrew the pause for round 1 while the engine quiesced: generation goes on"),
            std::string::npos)
      << log("w1");
}

// The operator on "ops" pauses generation on workers on other hosts and resumes it: each worker's engine follows
// (its slot, reported to the coordinator, says paused, then idle), and evicting one removes it.
TEST_F(BusRigFixture, TheOperatorOnAnotherHostPausesResumesAndEvictsWorkersOnOtherHosts) {
  startCoordinator();
  startWorker("w1", "w1");
  startWorker("w2", "w2");
  ASSERT_TRUE(waitForAgents(2));
  auto allIn = [&](const std::string& wanted) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto state = status();
      bool all = true;
      for (const std::string id : {"w1", "w2"}) all = all && agentIn(state, id)["state"] == wanted;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  const CapturedRun paused = ctl({"pause", "--mode", "wait"});
  ASSERT_EQ(paused.status, 0) << paused.describe();
  EXPECT_TRUE(allIn("paused")) << status().dump();
  EXPECT_EQ(status()["paused"], true);
  const CapturedRun resumed = ctl({"resume"});
  ASSERT_EQ(resumed.status, 0) << resumed.describe();
  EXPECT_TRUE(allIn("idle")) << status().dump();
  EXPECT_EQ(status()["paused"], false);

  const CapturedRun evicted = ctl({"evict", "w2"});
  ASSERT_EQ(evicted.status, 0) << evicted.describe();
  EXPECT_TRUE(agentIn(status(), "w2").is_null() || agentIn(status(), "w2")["state"] == "idle")
      << "w2 may register again at once; it must have been removed first: " << log("coordinator");
  EXPECT_NE(log("coordinator").find("'w2' was evicted"), std::string::npos) << log("coordinator");
}

}  // namespace
}  // namespace wsync::test
