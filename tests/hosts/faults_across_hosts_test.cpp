// Faults across hosts (docs/faults.md, "Across hosts"), with the real programs on the rig: the coordinator on
// "coord", the trainer on "train", a steady worker on "w1" and the victim on "w2", every round on the tcp channel.
//  - The victim's link is cut at each phase of a round (it is held at the phase by a delay fault, and the test cuts
//    its host's link while it is held there), and stays cut past every heartbeat and link timeout. The round of that
//    version ends within a bound; the victim is dropped within a named bound; once the link is back it registers
//    again and catches up; nobody serves a version that was not committed, and at the end everyone holds the
//    trainer's last committed bytes.
//  - The coordinator is killed and restarted while every agent is on another host: they register again, the
//    committed version does not go back, rounds commit again.
// The link and heartbeat timeouts are shortened as in the fault matrix's CI runs.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bus_rig_fixture.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

using Clock = std::chrono::steady_clock;

// 4 MiB in 8 tensors over 1 MiB buckets: a transfer of several buckets.
constexpr const char* kModel = "synthetic:8:4";
constexpr std::uint64_t kFaultVersion = 3;
// The victim is held this long at its phase: time for the test to see it there and cut its link.
constexpr std::chrono::milliseconds kHoldAtPhase{1500};
// A lost link is found within this (ZMTP heartbeats), on either side: shortened as in the fault matrix's CI run.
constexpr std::chrono::milliseconds kLinkTimeout{1500};
// The coordinator's phase timeouts, short so that a round with a silent member ends quickly.
constexpr std::chrono::milliseconds kPauseTimeout{4000};
constexpr std::chrono::milliseconds kTransferTimeout{6000};
// How long the victim's host stays cut off: past the heartbeat timeout (1 s), the link timeout and both phase
// timeouts, so that everyone has given up on it before it comes back.
constexpr std::chrono::milliseconds kPartition{7000};
// The victim is dropped within this of the cut: the heartbeat timeout, a liveness pass, the time its reports were
// already in flight, and slack for a loaded 2-core machine.
constexpr std::chrono::milliseconds kDropBound{4000};
// The faulted version's round ends within this of the cut: the longest phase timeout plus the heartbeat timeout
// plus slack (as the fault matrix's kOutcomeBound).
constexpr std::chrono::seconds kOutcomeBound{20};
// wsync-mon prints what it received in 100 ms batches: a commit a worker applied is in its output this much later.
constexpr std::chrono::milliseconds kMonitorLag{1000};
// After the link is back: the victim's link timeout, its registration, and the next commit.
constexpr std::chrono::seconds kRejoinBound{30};

// The round events a monitor on "ops" printed (wsync-mon --json), read as the test goes.
class EventLog {
 public:
  explicit EventLog(std::string path) : path_(std::move(path)) {}
  std::vector<nlohmann::json> all() const {
    std::vector<nlohmann::json> events;
    std::istringstream lines(readTextFile(path_));
    for (std::string line; std::getline(lines, line);) {
      auto event = nlohmann::json::parse(line, nullptr, false);
      if (!event.is_discarded()) events.push_back(std::move(event));
    }
    return events;
  }
  // The first event matching `match`, waiting up to `timeout`.
  template <typename Match>
  std::optional<nlohmann::json> waitFor(Match match, std::chrono::milliseconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    do {
      for (auto& event : all()) {
        if (match(event)) return event;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (Clock::now() < deadline);
    return std::nullopt;
  }

 private:
  std::string path_;
};

bool isOutcome(const nlohmann::json& event, std::uint64_t version) {
  return (event["topic"] == "round/commit" || event["topic"] == "round/abort") && event["version"] == version;
}

class FaultsAcrossHosts : public BusRigFixture, public testing::WithParamInterface<std::string> {
 protected:
  void startBus() {
    startCoordinator({"--link-timeout-ms", std::to_string(kLinkTimeout.count()), "--pause-timeout-ms",
                      std::to_string(kPauseTimeout.count()), "--transfer-timeout-ms",
                      std::to_string(kTransferTimeout.count()), "--bucket-mib", "1"});
    startMonitor();
  }
  // wsync-mon --json on "ops": the events the test reads.
  void startMonitor() {
    events_ = EventLog(path("mon.out"));  // the test's folder is known once SetUp ran
    const int fd = ::open(path("mon.out").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    auto args =
        std::vector<std::string>{"--bus",          bus_,           "--transport",           transport_, "--curve-keys",
                                 path("ops.keys"), "--server-key", path("coordinator.pub"), "--json",   "--wait-ms",
                                 "60000"};
    monitor_.reset();
    monitor_.emplace(
        rig_->spawn("ops", testBinary(WSYNC_MON_BIN), args,
                    {.stdoutFd = fd, .stderrFile = path("mon.log"), .stopGrace = std::chrono::seconds(5)}));
    ::close(fd);
    ASSERT_TRUE(events_.waitFor([](const auto& e) { return e["topic"] == "bus/beat"; }, kPatience))
        << readTextFile(path("mon.log"));
  }
  std::vector<std::string> agentFlags(std::vector<std::string> extra = {}) const {
    std::vector<std::string> flags{
        "--model", kModel, "--channel", "tcp", "--link-timeout-ms", std::to_string(kLinkTimeout.count())};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }
  bool waitForLog(const std::string& name, const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (log(name).find(text) == std::string::npos) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  // The applied version of `id` as the coordinator shows it, once it is at least `version`.
  bool waitForApplied(const std::string& id, std::uint64_t version, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      const auto agent = agentIn(status(), id);
      if (!agent.is_null() && agent["applied_version"].get<std::uint64_t>() >= version) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }
  // Stops the trainer, then the workers: each dumps what it holds, which must be the trainer's last commit.
  void expectEveryoneHoldsTheLastCommit(const std::vector<std::string>& workers) {
    agents_.at("t0").signal(SIGTERM);
    EXPECT_NE(agents_.at("t0").wait(kPatience), std::nullopt);
    const std::string trainer = readTextFile(path("t0.safetensors"));
    ASSERT_FALSE(trainer.empty()) << log("t0");
    for (const auto& id : workers) {
      agents_.at(id).signal(SIGTERM);
      EXPECT_EQ(agents_.at(id).wait(kPatience), 0) << log(id);
      EXPECT_TRUE(trainer == readTextFile(path(id + ".safetensors")))
          << id << " does not hold the trainer's last committed version byte for byte";
    }
  }
  // Every version a worker said it applied was committed on the bus (never a half-applied or aborted one).
  void expectOnlyCommittedVersionsApplied(const std::string& id) {
    std::set<std::uint64_t> committed;
    for (const auto& event : events_.all()) {
      if (event["topic"] == "round/commit") committed.insert(event["version"].get<std::uint64_t>());
    }
    std::istringstream lines(log(id));
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("| version ");
      if (at == std::string::npos || line.find(" applied (round ") == std::string::npos) continue;
      const std::uint64_t version = std::stoull(line.substr(at + 10));
      EXPECT_TRUE(committed.contains(version)) << id << " applied version " << version << ", never committed";
    }
  }

  EventLog events_{""};
  std::optional<cli::ChildProcess> monitor_;
};

TEST_P(FaultsAcrossHosts, ALinkCutAtAPhaseEndsTheRoundDropsTheWorkerAndItRejoinsAfterward) {
  const std::string phase = GetParam();
  startBus();
  startWorker("w1", "w1", agentFlags());
  startWorker("w2", "w2",
              agentFlags({"--fault", "delay@" + phase + ":" + std::to_string(kFaultVersion) + "+" +
                                         std::to_string(kHoldAtPhase.count())}));
  ASSERT_TRUE(waitForAgents(2)) << log("coordinator");
  startTrainer("t0", agentFlags({"--steps", "0", "--interval-ms", "300"}));

  // Held at its phase: cut its host off while it is there.
  ASSERT_TRUE(waitForLog("w2", "striking now", kPatience)) << log("w2");
  ASSERT_TRUE(rig_->setLink("w2", false));
  const auto cut = Clock::now();

  const auto dead = events_.waitFor(
      [](const auto& e) { return e["topic"] == "agent/dead" && e["agent"]["agent_id"] == "w2"; }, kDropBound);
  EXPECT_TRUE(dead) << "the partitioned worker was not dropped within " << kDropBound.count() << " ms";
  const auto outcome = events_.waitFor([](const auto& e) { return isOutcome(e, kFaultVersion); }, kOutcomeBound);
  ASSERT_TRUE(outcome) << "the round of version " << kFaultVersion << " did not end";
  // The rounds go on without it meanwhile.
  const auto later = events_.waitFor(
      [](const auto& e) {
        return e["topic"] == "round/commit" && e["version"].template get<std::uint64_t>() > kFaultVersion;
      },
      kOutcomeBound);
  EXPECT_TRUE(later) << "no later version committed while the worker was cut off";

  std::this_thread::sleep_for(
      kPartition - std::min(kPartition, std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - cut)));
  ASSERT_TRUE(rig_->setLink("w2", true));
  const std::uint64_t committedAtReturn = status()["committed_version"].get<std::uint64_t>();
  EXPECT_TRUE(waitForApplied("w2", committedAtReturn + 1, kRejoinBound))
      << "the worker did not catch up after its link came back: " << log("w2");
  expectEveryoneHoldsTheLastCommit({"w1", "w2"});
  // Everyone has stopped: once the monitor has printed what it last received, every commit is in its log.
  std::this_thread::sleep_for(kMonitorLag);
  expectOnlyCommittedVersionsApplied("w1");
  expectOnlyCommittedVersionsApplied("w2");
}

INSTANTIATE_TEST_SUITE_P(Phases, FaultsAcrossHosts,
                         testing::Values("begin", "pause", "transfer", "verify", "commit", "resume"),
                         [](const testing::TestParamInfo<std::string>& param) { return param.param; });

TEST_F(BusRigFixture, ACoordinatorRestartedWhileEveryAgentIsOnAnotherHostLosesNothing) {
  startCoordinator({"--link-timeout-ms", std::to_string(kLinkTimeout.count())});
  const std::vector<std::string> flags{
      "--model", kModel, "--channel", "tcp", "--link-timeout-ms", std::to_string(kLinkTimeout.count())};
  startWorker("w1", "w1", flags);
  startWorker("w2", "w2", flags);
  ASSERT_TRUE(waitForAgents(2));
  auto trainerFlags = flags;
  trainerFlags.insert(trainerFlags.end(), {"--steps", "0", "--interval-ms", "300"});
  startTrainer("t0", trainerFlags);
  const auto deadline = Clock::now() + kPatience;
  std::uint64_t before = 0;
  while (before < 2 && Clock::now() < deadline) {
    before = status()["committed_version"].get<std::uint64_t>();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_GE(before, 2U) << log("coordinator");

  coordinator_->signal(SIGKILL);
  ASSERT_EQ(coordinator_->wait(kPatience), 128 + SIGKILL);
  startCoordinator({"--link-timeout-ms", std::to_string(kLinkTimeout.count())});
  // Carried on from the dead coordinator's block on "coord": never back.
  EXPECT_GE(status()["committed_version"].get<std::uint64_t>(), before);
  ASSERT_TRUE(waitForAgents(3)) << "the agents on other hosts did not register again";
  // A version committed before both workers were back may have gone to neither (the trainer can register first
  // and commit a round of no workers): each must take one committed after this, from a round it was part of.
  const auto registeredAgain = status()["committed_version"].get<std::uint64_t>();
  for (const std::string id : {"w1", "w2"}) {
    EXPECT_TRUE([&] {
      const auto until = Clock::now() + std::chrono::milliseconds(kRejoinBound);
      while (Clock::now() < until) {
        const auto state = status();
        const auto agent = agentIn(state, id);
        if (!agent.is_null() && agent["applied_version"].get<std::uint64_t>() > registeredAgain) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      return false;
    }()) << id
         << " took no version after the restart: " << log(id);
  }
  agents_.at("t0").signal(SIGTERM);
  EXPECT_NE(agents_.at("t0").wait(kPatience), std::nullopt);
  const std::string trainer = readTextFile(path("t0.safetensors"));
  for (const std::string id : {"w1", "w2"}) {
    agents_.at(id).signal(SIGTERM);
    EXPECT_EQ(agents_.at(id).wait(kPatience), 0) << log(id);
    EXPECT_TRUE(trainer == readTextFile(path(id + ".safetensors"))) << id;
  }
}

}  // namespace
}  // namespace wsync::test
