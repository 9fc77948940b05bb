// wsync-ctl against a real running bus: status and agents (human and JSON), an operator's pause that holds every
// engine through a round until resume, abort and evict ending a round that cannot finish, and the documented exit
// codes (0 done, 3 no coordinator, 4 refused).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

#include <nlohmann/json.hpp>
#include <thread>

#include "round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

struct CtlResult {
  int status = -1;
  std::string out;
  std::string err;
};

class ControlTest : public RoundFixture {
 protected:
  CtlResult ctl(const std::vector<std::string>& args, const std::string& bus = {}) {
    std::string command = "exec '" + testBinary(WSYNC_CTL_BIN) + "' --bus " + (bus.empty() ? bus_ : bus);
    for (const auto& arg : args) command += " '" + arg + "'";
    command += " > '" + path("ctl.out") + "' 2> '" + path("ctl.err") + "'";
    auto process = ChildProcess::spawn("/bin/sh", {"-c", command});
    CtlResult result;
    result.status = process.wait(kPatience).value_or(-1);
    result.out = readTextFile(path("ctl.out"));
    result.err = readTextFile(path("ctl.err"));
    return result;
  }
  // The phase each registered worker's agent wrote in its control-block slot.
  std::vector<bus::AgentPhase> workerPhases() {
    std::vector<bus::AgentPhase> phases;
    for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
      const auto snapshot = block_->agentSlot(slot);
      if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active && snapshot->role == msg::Role::Worker) {
        phases.push_back(snapshot->phase);
      }
    }
    return phases;
  }
  bool waitForWorkerPhases(bus::AgentPhase phase, std::size_t workers) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto phases = workerPhases();
      if (phases.size() == workers && std::all_of(phases.begin(), phases.end(), [&](auto p) { return p == phase; })) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // A worker whose engine needs minutes to drain its requests: a round in `wait` mode stays in its pause phase.
  // Its log (at info) goes to `stderrPath` where given.
  ChildProcess startSlowDrainingWorker(const std::string& id, const std::string& stderrPath = {}) {
    return startWorker(id, {"--tokens", "1000000", "--concurrency", "1", "--log-level", "info"}, stderrPath);
  }
};

TEST_F(ControlTest, StatusAndAgentsDescribeTheBus) {
  startCoordinator();
  auto w0 = startWorker("w0");
  auto w1 = startWorker("w1");
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "2"});
  ASSERT_TRUE(nextOutcome().committed);
  ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);

  const auto status = ctl({"status", "--json"});
  ASSERT_EQ(status.status, 0) << status.err;
  const auto state = nlohmann::json::parse(status.out);
  EXPECT_EQ(state["committed_version"], 2);
  EXPECT_EQ(state["committed_label"], "step-1");
  EXPECT_EQ(state["phase"], "idle");
  EXPECT_EQ(state["paused"], false);
  ASSERT_EQ(state["agents"].size(), 2U);

  const auto agents = ctl({"agents", "--json"});
  ASSERT_EQ(agents.status, 0) << agents.err;
  const auto list = nlohmann::json::parse(agents.out);
  ASSERT_TRUE(list.is_array());
  EXPECT_EQ(list.size(), 2U);
  EXPECT_EQ(list[0]["role"], "worker");
  // Each worker's slot shows what it did: generating again, and its part of the last round (every byte of it).
  for (const auto& agent : list) {
    EXPECT_EQ(agent["state"], "idle") << agent;
    EXPECT_EQ(agent["transfer_round"], state["round"]) << agent;
    EXPECT_GT(agent["transfer_bytes"].get<std::uint64_t>(), 0U) << agent;
    EXPECT_EQ(agent["transfer_bytes"], list[0]["transfer_bytes"]) << agent;
  }

  const auto human = ctl({"status"});
  EXPECT_EQ(human.status, 0);
  EXPECT_NE(human.out.find("committed version 2 (step-1)"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("generation running"), std::string::npos) << human.out;
}

TEST_F(ControlTest, AnOperatorsPauseHoldsEveryEngineThroughARoundUntilResume) {
  startCoordinator();
  auto w0 = startWorker("w0");
  auto w1 = startWorker("w1");
  waitForAgents(2);
  const auto paused = ctl({"pause", "--mode", "wait", "--reason", "maintenance"});
  ASSERT_EQ(paused.status, 0) << paused.err;
  EXPECT_NE(paused.out.find("generation paused in mode Wait on 2 workers"), std::string::npos) << paused.out;
  EXPECT_TRUE(waitForWorkerPhases(bus::AgentPhase::Paused, 2));
  EXPECT_TRUE(block_->pauseState().paused);

  auto trainer = startTrainer("t0", {"--steps", "1"});
  ASSERT_TRUE(nextOutcome().committed) << "rounds run while an operator holds generation";
  EXPECT_EQ(trainer.wait(kPatience), 0);
  ASSERT_TRUE(waitForApplied("w0", 1) && waitForApplied("w1", 1));
  EXPECT_TRUE(waitForWorkerPhases(bus::AgentPhase::Paused, 2))
      << "the round's resume must not end the operator's pause";
  EXPECT_TRUE(block_->pauseState().paused);
  EXPECT_TRUE(ctl({"status", "--json"}).out.find("\"paused\":true") != std::string::npos);

  const auto resumed = ctl({"resume"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_TRUE(waitForWorkerPhases(bus::AgentPhase::Idle, 2));
  EXPECT_FALSE(block_->pauseState().paused);
  const auto again = ctl({"resume"});
  EXPECT_EQ(again.status, 4) << "nothing to resume";
  EXPECT_NE(again.err.find("not paused by an operator"), std::string::npos) << again.err;
}

// Issue 13, 10: the pause is kept in the control block, so a coordinator killed and restarted holds it, and the
// workers that register again never resume generating in between.
TEST_F(ControlTest, AnOperatorsPauseSurvivesACoordinatorRestart) {
  startCoordinator();
  // Debug logs: the worker says each time its engine resumes.
  auto w0 = startWorker("w0", {"--log-level", "debug"}, path("w0.log"));
  waitForAgents(1);
  const auto paused = ctl({"pause", "--mode", "keep", "--reason", "maintenance"});
  ASSERT_EQ(paused.status, 0) << paused.err;
  ASSERT_TRUE(waitForWorkerPhases(bus::AgentPhase::Paused, 1));
  const auto resumesBefore = [&] { return occurrences(readTextFile(path("w0.log")), "generation resumes"); };
  const std::size_t before = resumesBefore();

  coordinator_->signal(SIGKILL);
  ASSERT_EQ(coordinator_->wait(kPatience), 128 + SIGKILL);
  startCoordinator({}, path("coordinator-2.log"));
  EXPECT_NE(readTextFile(path("coordinator-2.log")).find("paused by an operator"), std::string::npos);
  waitForAgents(1);
  EXPECT_TRUE(waitForWorkerPhases(bus::AgentPhase::Paused, 1));
  EXPECT_TRUE(block_->pauseState().paused);
  EXPECT_EQ(block_->operatorPause(), msg::PauseMode::Keep);
  const auto status = ctl({"status"});
  EXPECT_NE(status.out.find("generation paused by an operator (keep) until 'wsync-ctl resume'"), std::string::npos)
      << status.out;
  EXPECT_NE(ctl({"status", "--json"}).out.find("\"operator_paused\":true"), std::string::npos);
  // Rounds still run under the pause, as before the restart.
  auto trainer = startTrainer("t0", {"--steps", "1"});
  ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);
  ASSERT_TRUE(waitForApplied("w0", 1));
  EXPECT_TRUE(waitForWorkerPhases(bus::AgentPhase::Paused, 1));
  EXPECT_EQ(resumesBefore(), before) << "the engine generated again without an operator's resume:\n"
                                     << readTextFile(path("w0.log"));

  const auto resumed = ctl({"resume"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_TRUE(waitForWorkerPhases(bus::AgentPhase::Idle, 1));
  EXPECT_FALSE(block_->operatorPause());
  EXPECT_GT(resumesBefore(), before);
}

// An operator's pause in `wait` mode, lifted while the engine still drains: the engine goes back to generating at
// once and takes the next round (before, its agent read nothing until the drain ended).
TEST_F(ControlTest, AnOperatorsPauseLiftedWhileTheEngineDrainsIsWithdrawn) {
  startCoordinator({"--pause-timeout-ms", "2000"});
  const std::string workerLog = path("slow.log");
  auto worker = startSlowDrainingWorker("slow", workerLog);
  waitForAgents(1);
  ASSERT_EQ(ctl({"pause", "--mode", "wait"}).status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // draining
  ASSERT_EQ(ctl({"resume"}).status, 0);
  auto trainer = startTrainer("t0", {"--steps", "1", "--pause-mode", "keep"});
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("slow", 1));
  EXPECT_NE(readTextFile(workerLog).find("the bus withdrew the pause for an operator's pause while the engine "
                                         "quiesced: generation goes on"),
            std::string::npos)
      << readTextFile(workerLog);
  worker.signal(SIGTERM);
  EXPECT_EQ(worker.wait(kPatience), 0);
}

// An operator's pause in `wait` mode, paused again in `keep` mode while the engine still drains: the word's mode
// changes while it stays held, so the watch withdraws the first pause and the agent pauses the engine in the new mode
// at once (before, it kept draining for a minute, blind to the message that asked for `keep`).
TEST_F(ControlTest, AnOperatorsPauseRepeatedInAnotherModeWhileTheEngineDrainsTakesTheNewMode) {
  startCoordinator();
  const std::string workerLog = path("slow.log");
  auto worker = startSlowDrainingWorker("slow", workerLog);
  waitForAgents(1);
  ASSERT_EQ(ctl({"pause", "--mode", "wait"}).status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // draining
  const auto again = ctl({"pause", "--mode", "keep"});
  ASSERT_EQ(again.status, 0) << again.err;
  // Far less than the drain (about a minute of tokens): only a pause in the new mode gets there this soon.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool paused = false;
  while (!paused && std::chrono::steady_clock::now() < deadline) {
    const auto phases = workerPhases();
    paused = phases.size() == 1 && phases[0] == bus::AgentPhase::Paused;
    if (!paused) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string log = readTextFile(workerLog);
  EXPECT_TRUE(paused) << log;
  EXPECT_NE(log.find("the bus withdrew the pause for an operator's pause while the engine quiesced"), std::string::npos)
      << log;
  EXPECT_NE(log.find("an operator paused generation (mode Keep)"), std::string::npos) << log;
  ASSERT_EQ(ctl({"resume"}).status, 0);
  EXPECT_TRUE(waitForWorkerPhases(bus::AgentPhase::Idle, 1));
  worker.signal(SIGTERM);
  EXPECT_EQ(worker.wait(kPatience), 0);
}

TEST_F(ControlTest, AbortEndsTheRoundInProgressAndTheWorkersKeepTheirVersion) {
  startCoordinator();
  auto worker = startSlowDrainingWorker("slow");
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "1", "--pause-mode", "wait"});
  // The round waits for the worker's engine to drain; it can only end by the operator's hand.
  ASSERT_TRUE(waitForRoundPhase(msg::RoundPhase::Pause));
  const auto aborted = ctl({"abort", "--reason", "test"});
  ASSERT_EQ(aborted.status, 0) << aborted.err;
  const auto outcome = nextOutcome();
  EXPECT_FALSE(outcome.committed);
  EXPECT_EQ(outcome.reason, msg::AbortReason::Requested);
  EXPECT_NE(outcome.detail.find("an operator aborted the round (test)"), std::string::npos) << outcome.detail;
  EXPECT_EQ(trainer.wait(kPatience), 4) << "its step was not committed";
  EXPECT_EQ(appliedVersion("slow"), 0U);
  const auto nothing = ctl({"abort"});
  EXPECT_EQ(nothing.status, 4);
  EXPECT_NE(nothing.err.find("NoRound"), std::string::npos) << nothing.err;
}

TEST_F(ControlTest, EvictingTheAgentARoundWaitsForEndsTheRound) {
  startCoordinator();
  auto worker = startSlowDrainingWorker("stuck");
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "1", "--pause-mode", "wait"});
  ASSERT_TRUE(waitForRoundPhase(msg::RoundPhase::Pause));
  worker.signal(SIGSTOP);  // a stuck engine: alive, silent only after the heartbeat timeout
  const auto evicted = ctl({"evict", "stuck", "--reason", "stuck engine"});
  ASSERT_EQ(evicted.status, 0) << evicted.err;
  EXPECT_NE(evicted.out.find("agent 'stuck' evicted"), std::string::npos);
  const auto outcome = nextOutcome();
  EXPECT_FALSE(outcome.committed);
  EXPECT_NE(outcome.detail.find("evicted by an operator (stuck engine)"), std::string::npos) << outcome.detail;
  EXPECT_EQ(trainer.wait(kPatience), 4);
  const auto unknown = ctl({"evict", "nobody"});
  EXPECT_EQ(unknown.status, 4);
  EXPECT_NE(unknown.err.find("no agent 'nobody'"), std::string::npos) << unknown.err;
  worker.signal(SIGKILL);
}

// An evicted agent that is alive is told why. The notice answers none of its requests, so the agent logs it rather
// than dropping it, and registers again.
TEST_F(ControlTest, AnEvictedAgentLogsWhyAndRegistersAgain) {
  startCoordinator();
  const std::string workerLog = path("w0.log");
  auto worker = startWorker("w0", {}, workerLog);
  waitForAgents(1);
  const auto evicted = ctl({"evict", "w0", "--reason", "test"});
  ASSERT_EQ(evicted.status, 0) << evicted.err;
  const std::string notice = "coordinator: NotAllowed: evicted by an operator (test)";
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (readTextFile(workerLog).find(notice) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(readTextFile(workerLog).find(notice), std::string::npos) << readTextFile(workerLog);
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "1"});
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);
  worker.signal(SIGTERM);
  EXPECT_EQ(worker.wait(kPatience), 0);
}

TEST_F(ControlTest, WithoutACoordinatorTheExitCodeIs3) {
  const auto status = ctl({"--timeout-ms", "300", "status"});
  EXPECT_EQ(status.status, 3) << status.err;
  EXPECT_NE(status.err.find("no coordinator answered"), std::string::npos) << status.err;
}

}  // namespace
}  // namespace wsync::test
