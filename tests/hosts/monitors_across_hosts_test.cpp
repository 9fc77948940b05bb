// Today's code across hosts: a coordinator on host "coord" serving tcp with CURVE, and wsync-ctl and wsync-mon on
// host "ops", which shares no memory and no runtime folder with it. Monitors and the control tool talk to the
// coordinator over its sockets only, so they report the bus from another host: its epoch, its committed version and
// an agent that joined on the coordinator's host.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "captured_run.hpp"
#include "host_rig.hpp"
#include "log_tails.hpp"
#include "round_fixture.hpp"
#include "test_environment.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

using Clock = std::chrono::steady_clock;

// Any port: the coordinator's host has a network stack of its own (the bus takes this port and the next).
constexpr const char* kBusPort = "5555";
// The coordinator beats this often, so that a monitor is live soon after it starts.
constexpr const char* kHeartbeatIntervalMs = "100";
// wsync-ctl's wait for the coordinator's answer: its default (5 s) with room for a loaded machine.
constexpr std::chrono::milliseconds kCtlAnswerTimeout{20'000};
// How long a stopped program may take to finish cleanly before it is killed.
constexpr std::chrono::seconds kStopGrace{5};

// An fd for a child's stdout, written to `path` (closed by the caller once the child is started).
int outputFile(const std::string& path) { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); }

// Waits until `text()` holds `needle` or `process` has ended or kPatience has passed; whether it does.
template <typename Text>
bool waitForText(Text text, const std::string& needle, cli::ChildProcess& process) {
  const auto deadline = Clock::now() + kPatience;
  while (text().find(needle) == std::string::npos) {
    if (Clock::now() >= deadline || !process.running()) return text().find(needle) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class MonitorsAcrossHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto reason = HostRig::unavailableReason()) GTEST_SKIP() << *reason;
    auto made = HostRig::make({"coord", "ops"});
    ASSERT_TRUE(made) << made.error();
    rig_.emplace(std::move(*made));
    bus_ = uniqueBusName("hosts");
    directory_ = ::testing::TempDir() + "/" + bus_;
    std::filesystem::create_directories(directory_);
    transport_ = "tcp://" + rig_->address("coord") + ":" + kBusPort;
  }
  void TearDown() override {
    if (HasFailure()) printLogTails(directory_);
    for (auto* process : {&mon_, &worker_, &coordinator_}) process->reset();
    rig_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  std::string path(const std::string& name) const { return directory_ + "/" + name; }

  // wsync-keygen run on `host`: the key pair in NAME.keys, its public line back.
  std::string makeKeys(const std::string& host, const std::string& name) {
    const CapturedRun run =
        runToEnd(rig_->command(host, testBinary(WSYNC_KEYGEN_BIN), {path(name + ".keys")}), kPatience);
    EXPECT_EQ(run.status, 0) << run.describe();
    EXPECT_EQ(run.out.rfind("public ", 0), 0U) << run.out;
    return run.out;
  }
  std::vector<std::string> clientArgs(const std::string& keys) const {
    return {"--bus",        bus_,
            "--transport",  transport_,
            "--curve-keys", path(keys + ".keys"),
            "--server-key", path("coordinator.pub")};
  }
  CapturedRun ctlOnOps(const std::vector<std::string>& command) {
    auto args = clientArgs("ops");
    args.insert(args.end(), {"--timeout-ms", std::to_string(kCtlAnswerTimeout.count())});
    args.insert(args.end(), command.begin(), command.end());
    return runToEnd(rig_->command("ops", testBinary(WSYNC_CTL_BIN), args), kPatience);
  }

  std::optional<HostRig> rig_;
  std::string bus_;
  std::string directory_;
  std::string transport_;
  std::optional<cli::ChildProcess> coordinator_;
  std::optional<cli::ChildProcess> worker_;
  std::optional<cli::ChildProcess> mon_;
};

TEST_F(MonitorsAcrossHostsTest, CtlAndMonOnAnotherHostReportACoordinatorServingTcpWithCurve) {
  // Each key pair is made on the host that holds it; the files meet in the test's folder, as on a shared filesystem.
  std::ofstream(path("coordinator.pub")) << makeKeys("coord", "coordinator");
  const std::string workerKey = makeKeys("coord", "worker");
  const std::string opsKey = makeKeys("ops", "ops");
  std::ofstream(path("allowed")) << "# the worker on coord and the operator on ops\n" << workerKey << opsKey;
  ASSERT_FALSE(HasFailure());

  coordinator_.emplace(rig_->spawn("coord", testBinary(WSYNC_COORDINATOR_BIN),
                                   {"--bus", bus_, "--transport", transport_, "--curve-keys", path("coordinator.keys"),
                                    "--allow-keys", path("allowed"), "--heartbeat-interval-ms", kHeartbeatIntervalMs},
                                   {.stderrFile = path("coordinator.log"), .stopGrace = kStopGrace}));
  const auto coordinatorLog = [&] { return readTextFile(path("coordinator.log")); };
  ASSERT_TRUE(waitForText(coordinatorLog, "' ready (epoch ", *coordinator_)) << coordinatorLog();
  std::smatch ready;
  const std::string log = coordinatorLog();
  ASSERT_TRUE(std::regex_search(log, ready, std::regex(R"(ready \(epoch ([0-9a-f]{16}), requests (\S+),)"))) << log;
  const std::string epoch = ready[1];
  EXPECT_EQ(ready[2], transport_);

  // wsync-mon on ops, live before the worker joins, so that it sees the join as an event.
  const int monFd = outputFile(path("mon.out"));
  ASSERT_GE(monFd, 0);
  auto monArgs = clientArgs("ops");
  monArgs.insert(monArgs.end(), {"--json", "--wait-ms", std::to_string(std::chrono::milliseconds(kPatience).count())});
  mon_.emplace(rig_->spawn("ops", testBinary(WSYNC_MON_BIN), monArgs,
                           {.stdoutFd = monFd, .stderrFile = path("mon.log"), .stopGrace = kStopGrace}));
  ::close(monFd);
  const auto monOutput = [&] { return readTextFile(path("mon.out")); };
  ASSERT_TRUE(waitForText(monOutput, "\"topic\":\"bus/beat\"", *mon_)) << readTextFile(path("mon.log"));

  auto workerArgs = clientArgs("worker");
  workerArgs.insert(workerArgs.end(), {"--id", "w0", "--model", "tiny", "--step-ms", "1", "-q"});
  worker_.emplace(rig_->spawn("coord", testBinary(WSYNC_WORKER_BIN), workerArgs,
                              {.stderrFile = path("worker.log"), .stopGrace = kStopGrace}));
  ASSERT_TRUE(waitForText(monOutput, "\"topic\":\"agent/joined\"", *mon_)) << readTextFile(path("mon.log"));

  // wsync-ctl on ops: the same coordinator (its epoch), nothing committed yet, the worker on coord.
  const CapturedRun status = ctlOnOps({"status", "--json"});
  ASSERT_EQ(status.status, 0) << status.describe();
  const auto state = nlohmann::json::parse(status.out, nullptr, false);
  ASSERT_FALSE(state.is_discarded()) << status.out;
  EXPECT_EQ(state["bus"], bus_);
  EXPECT_EQ(state["epoch"], epoch);
  EXPECT_EQ(state["committed_version"], 0);
  EXPECT_EQ(state["phase"], "idle");
  EXPECT_EQ(state["paused"], false);
  ASSERT_EQ(state["agents"].size(), 1U) << status.out;
  EXPECT_EQ(state["agents"][0]["agent_id"], "w0");
  EXPECT_EQ(state["agents"][0]["role"], "worker");
  EXPECT_EQ(state["agents"][0]["applied_version"], 0);

  const CapturedRun human = ctlOnOps({"status"});
  ASSERT_EQ(human.status, 0) << human.describe();
  EXPECT_NE(human.out.find("bus '" + bus_ + "' (epoch " + epoch + "): committed version 0\n"), std::string::npos)
      << human.out;
  EXPECT_NE(human.out.find("no round in progress\n"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("generation running\n"), std::string::npos) << human.out;
  EXPECT_TRUE(std::regex_search(human.out, std::regex(R"(\nw0 +worker +-?[0-9]+ +[0-9]+ +[a-z_]+ +0 +[0-9]+ ms\n)")))
      << human.out;

  // wsync-mon --json on ops: every line one event of this coordinator; beats, then the worker's join.
  mon_->signal(SIGTERM);
  EXPECT_EQ(mon_->wait(kPatience), 0) << readTextFile(path("mon.log"));
  std::istringstream lines(monOutput());
  std::size_t beats = 0;
  std::size_t joins = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto event = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(event.is_discarded()) << "not JSON: " << line;
    EXPECT_EQ(event["epoch"], epoch) << line;
    if (event["topic"] == "bus/beat") {
      ++beats;
      EXPECT_EQ(event["type"], "CoordinatorBeat") << line;
      EXPECT_EQ(event["committed_version"], 0) << line;
    } else if (event["topic"] == "agent/joined") {
      ++joins;
      EXPECT_EQ(event["type"], "AgentEvent") << line;
      EXPECT_EQ(event["kind"], "Joined") << line;
      EXPECT_EQ(event["agent"]["agent_id"], "w0") << line;
      EXPECT_EQ(event["agent"]["role"], "Worker") << line;
    }
  }
  EXPECT_GE(beats, 1U);
  EXPECT_EQ(joins, 1U);

  // The coordinator logged nothing refused: both hosts' clients got in with their keys.
  EXPECT_EQ(coordinatorLog().find("refused"), std::string::npos) << coordinatorLog();
}

}  // namespace
}  // namespace wsync::test
