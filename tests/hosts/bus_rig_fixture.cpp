#include "bus_rig_fixture.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "log_tails.hpp"
#include "round_fixture.hpp"
#include "test_environment.hpp"
#include "text_file.hpp"

namespace wsync::test {

namespace {

// Any port: "coord" has a network stack of its own (the bus takes this port and the next).
constexpr const char* kBusPort = "5555";
// The fixture's coordinator: a dead agent within a second, beats every 100 ms (the integration tests' settings).
constexpr const char* kHeartbeatIntervalMs = "100";
constexpr const char* kHeartbeatTimeoutMs = "1000";
// wsync-ctl's wait for the coordinator's answer: its default (5 s) with room for a loaded machine.
constexpr std::chrono::milliseconds kCtlAnswerTimeout{20'000};
// How long a stopped program may take to finish cleanly (and dump its weights) before it is killed.
constexpr std::chrono::seconds kStopGrace{10};

// Appends `extra`, and the tiny model unless `extra` names one (the programs refuse an option given twice).
void withDefaultModel(std::vector<std::string>& args, const std::vector<std::string>& extra) {
  if (std::find(extra.begin(), extra.end(), "--model") == extra.end()) args.insert(args.end(), {"--model", "tiny"});
  args.insert(args.end(), extra.begin(), extra.end());
}

}  // namespace

void BusRigFixture::SetUp() {
  if (const auto reason = HostRig::unavailableReason()) GTEST_SKIP() << *reason;
  auto made = HostRig::make(kHosts);
  ASSERT_TRUE(made) << made.error();
  rig_.emplace(std::move(*made));
  bus_ = uniqueBusName("rig");
  directory_ = ::testing::TempDir() + "/" + bus_;
  std::filesystem::create_directories(directory_);
  transport_ = "tcp://" + rig_->address("coord") + ":" + kBusPort;
  // Each key pair is made on the host that holds it; the coordinator admits them all.
  std::ofstream(path("coordinator.pub")) << makeKeys("coord", "coordinator");
  std::ofstream allowed(path("allowed"));
  for (const std::string host : {"train", "w1", "w2", "ops"}) allowed << makeKeys(host, host);
}

void BusRigFixture::TearDown() {
  if (HasFailure()) printLogTails(directory_);
  agents_.clear();
  coordinator_.reset();
  rig_.reset();
  std::error_code ignored;
  if (!HasFailure()) std::filesystem::remove_all(directory_, ignored);
}

std::string BusRigFixture::log(const std::string& name) const { return readTextFile(path(name + ".log")); }

std::string BusRigFixture::makeKeys(const std::string& host, const std::string& name) {
  const CapturedRun run =
      runToEnd(rig_->command(host, testBinary(WSYNC_KEYGEN_BIN), {path(name + ".keys")}), kPatience);
  EXPECT_EQ(run.status, 0) << run.describe();
  return run.out;
}

std::vector<std::string> BusRigFixture::clientArgs(const std::string& keys) const {
  return {"--bus",        bus_,
          "--transport",  transport_,
          "--curve-keys", path(keys + ".keys"),
          "--server-key", path("coordinator.pub")};
}

void BusRigFixture::startCoordinator(const std::vector<std::string>& extra) {
  std::vector<std::string> args{"--bus",
                                bus_,
                                "--transport",
                                transport_,
                                "--curve-keys",
                                path("coordinator.keys"),
                                "--allow-keys",
                                path("allowed"),
                                "--heartbeat-interval-ms",
                                kHeartbeatIntervalMs,
                                "--heartbeat-timeout-ms",
                                kHeartbeatTimeoutMs};
  args.insert(args.end(), extra.begin(), extra.end());
  coordinator_.reset();
  coordinator_.emplace(rig_->spawn("coord", testBinary(WSYNC_COORDINATOR_BIN), args,
                                   {.stderrFile = path("coordinator.log"), .stopGrace = kStopGrace}));
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (log("coordinator").find("' ready (epoch ") == std::string::npos) {
    ASSERT_TRUE(coordinator_->running()) << "the coordinator exited: " << log("coordinator");
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the coordinator did not come up";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

cli::ChildProcess& BusRigFixture::startWorker(const std::string& id, const std::string& host,
                                              const std::vector<std::string>& extra) {
  auto args = clientArgs(host);
  args.insert(args.end(), {"--id", id, "--step-ms", "1", "--dump", path(id + ".safetensors")});
  withDefaultModel(args, extra);
  agents_.erase(id);
  return agents_
      .emplace(id, rig_->spawn(host, testBinary(WSYNC_WORKER_BIN), args,
                               {.stderrFile = path(id + ".log"), .stopGrace = kStopGrace}))
      .first->second;
}

cli::ChildProcess& BusRigFixture::startTrainer(const std::string& id, const std::vector<std::string>& extra) {
  auto args = clientArgs("train");
  args.insert(args.end(), {"--id", id, "--dump", path(id + ".safetensors")});
  withDefaultModel(args, extra);
  agents_.erase(id);
  return agents_
      .emplace(id, rig_->spawn("train", testBinary(WSYNC_TRAINER_BIN), args,
                               {.stderrFile = path(id + ".log"), .stopGrace = kStopGrace}))
      .first->second;
}

CapturedRun BusRigFixture::ctl(const std::vector<std::string>& command) {
  auto args = clientArgs("ops");
  args.insert(args.end(), {"--timeout-ms", std::to_string(kCtlAnswerTimeout.count())});
  args.insert(args.end(), command.begin(), command.end());
  return runToEnd(rig_->command("ops", testBinary(WSYNC_CTL_BIN), args), kPatience);
}

nlohmann::json BusRigFixture::status() {
  const CapturedRun run = ctl({"status", "--json"});
  EXPECT_EQ(run.status, 0) << run.describe();
  auto state = nlohmann::json::parse(run.out, nullptr, false);
  EXPECT_FALSE(state.is_discarded()) << run.out;
  return state.is_discarded() ? nlohmann::json() : state;
}

bool BusRigFixture::waitForAgents(std::size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto state = status();
    if (state.is_object() && state["agents"].size() >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

nlohmann::json BusRigFixture::agentIn(const nlohmann::json& state, const std::string& id) {
  if (!state.is_object()) return nullptr;
  for (const auto& agent : state["agents"]) {
    if (agent["agent_id"] == id) return agent;
  }
  return nullptr;
}

}  // namespace wsync::test
