// The nccl channel between hosts (docs/hosts.md), on one GPU machine: the worker runs as on another host (a mount
// namespace with a /dev/shm of its own, so it cannot map the coordinator's control block and mirrors the bus from
// its beats), the bus is tcp, and NCCL is forced through its network transport (sockets over the loopback, P2P and
// shared memory off, a host id of its own per process, so that NCCL takes the two processes for two nodes and lets
// both ranks share the one GPU). Every committed version must reach the worker byte for byte; a remote worker killed
// in the middle of a transfer must end the trainer's broadcast through its cancel probe, as a local one does.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "free_port.hpp"
#include "gpu_peers.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/channel/nccl/nccl_channel.hpp"

namespace wsync::test {
namespace {

constexpr const char* kModel = "opt-125m";
constexpr const char* kBucketMiB = "16";
constexpr const char* kUnshare = "/usr/bin/unshare";
// A dead worker is noticed by its heartbeat (the fixture's timeout; from another host no pid can be watched), and
// the trainer's broadcast then ends through its cancel probe: well under the NCCL stall watchdog.
constexpr std::chrono::milliseconds kAbortBound = std::chrono::milliseconds{bus::gpu::kNcclStallTimeout} / 2;

class NcclAcrossHosts : public RoundFixture {
 protected:
  void SetUp() override {
    // Every program of the test inherits these: NCCL over sockets on the loopback, as between two nodes, saying
    // which transport it took.
    for (const auto& [name, value] : {std::pair{"NCCL_NVLS_ENABLE", "0"}, std::pair{"NCCL_P2P_DISABLE", "1"},
                                      std::pair{"NCCL_SHM_DISABLE", "1"}, std::pair{"NCCL_SOCKET_IFNAME", "lo"},
                                      std::pair{"NCCL_DEBUG", "INFO"}, std::pair{"NCCL_DEBUG_SUBSYS", "INIT"}}) {
      ::setenv(name, value, 1);
    }
    RoundFixture::SetUp();
    // NCCL writes its lines to stdout unless told a file (%p: the process).
    ::setenv("NCCL_DEBUG_FILE", path("nccl.%p.log").c_str(), 1);
    transport_ = "tcp://127.0.0.1:" + std::to_string(freePortPair());
  }
  void TearDown() override {
    RoundFixture::TearDown();
    for (const char* name : {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_SOCKET_IFNAME", "NCCL_HOSTID", "NCCL_DEBUG",
                             "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}) {
      ::unsetenv(name);
    }
  }

  // Why this machine cannot run the test, if it cannot.
  static std::optional<std::string> missing() {
    if (auto why = missingGpus(1)) return why;
    if (auto version = bus::gpu::ncclVersion(); !version) return "NCCL cannot be loaded: " + version.error().describe();
    if (::geteuid() != 0) return std::string("a mount namespace with a /dev/shm of its own needs root");
    if (::access(kUnshare, X_OK) != 0) return std::string("no ") + kUnshare;
    return std::nullopt;
  }

  void startBus() {
    startCoordinator({"--transport", transport_, "--insecure", "--gpu-bucket-mib", kBucketMiB},
                     path("coordinator.log"));
  }
  // `program` as on another host than the coordinator's: its own mount namespace and /dev/shm, its own NCCL host id.
  ChildProcess startRemote(const std::string& program, const std::string& id, const std::vector<std::string>& extra) {
    ::setenv("NCCL_HOSTID", ("wsync-test-" + id).c_str(), 1);
    std::vector<std::string> args{"--mount",
                                  "sh",
                                  "-c",
                                  "mount -t tmpfs tmpfs /dev/shm && exec \"$0\" \"$@\"",
                                  testBinary(program),
                                  "--bus",
                                  bus_,
                                  "--transport",
                                  transport_,
                                  "--id",
                                  id,
                                  "--model",
                                  kModel,
                                  "--channel",
                                  "nccl",
                                  "--cuda-device",
                                  "0",
                                  "--dump",
                                  path(id + ".safetensors")};
    args.insert(args.end(), extra.begin(), extra.end());
    return ChildProcess::spawn(kUnshare, args, {.stderrFile = path(id + ".log")});
  }
  ChildProcess startRemoteWorker(const std::string& id, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"--step-ms", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return startRemote(WSYNC_WORKER_BIN, id, args);
  }
  ChildProcess startRemoteTrainer(std::uint64_t steps, std::uint64_t intervalMs = 0) {
    return startRemote(WSYNC_TRAINER_BIN, "t0",
                       {"--steps", std::to_string(steps), "--interval-ms", std::to_string(intervalMs)});
  }
  // Whether any NCCL log of the test's processes says `text`.
  bool ncclSaid(const std::string& text) const {
    for (const auto& entry : std::filesystem::directory_iterator(directory_)) {
      if (entry.path().filename().string().starts_with("nccl.") &&
          readTextFile(entry.path().string()).find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  void expectOnAnotherHost(const std::string& id) {
    const std::string log = readTextFile(path(id + ".log"));
    EXPECT_NE(log.find("(another host"), std::string::npos) << id << " was not on another host: " << log;
  }
};

// The trainer and the worker each on a host of their own, the coordinator on a third: the layout of a multi-node run.
TEST_F(NcclAcrossHosts, ARemoteWorkerTakesEveryVersionFromARemoteTrainerOverNcclsNetworkTransport) {
  if (auto why = missing()) GTEST_SKIP() << *why;
  startBus();
  auto worker = startRemoteWorker("w0");
  waitForAgents(1);
  auto trainer = startRemoteTrainer(3);
  for (int round = 1; round <= 3; ++round) {
    const auto outcome = nextOutcome();
    ASSERT_TRUE(outcome.committed) << "round " << round << ": " << outcome.detail;
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  worker.signal(SIGTERM);
  EXPECT_EQ(worker.wait(kPatience), 0);
  expectOnAnotherHost("w0");
  expectOnAnotherHost("t0");
  EXPECT_TRUE(ncclSaid("via NET/Socket")) << "NCCL did not take its network transport";
  const std::string sent = readTextFile(path("t0.safetensors"));
  ASSERT_FALSE(sent.empty());
  EXPECT_TRUE(sent == readTextFile(path("w0.safetensors"))) << "the remote worker does not hold the last version";
}

// A frozen remote worker keeps its NCCL sockets open: only the coordinator can end the trainer's broadcast, by
// aborting the round once the worker's reports stopped, and the trainer on another host learns it from the beats
// its mirror follows (its cancel probe), well before NCCL's stall watchdog.
TEST_F(NcclAcrossHosts, AFrozenRemoteWorkerIsAbortedAndTheRemoteTrainerHearsItThroughItsMirror) {
  if (auto why = missing()) GTEST_SKIP() << *why;
  startBus();
  auto victim = startRemoteWorker("victim", {"--fault", "stop@transfer:2"});  // after its first bucket of version 2
  waitForAgents(1);
  auto trainer = startRemoteTrainer(0, 200);  // publishes until stopped
  ASSERT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  ASSERT_FALSE(aborted.committed) << "version 2 reached a worker that froze receiving it";
  EXPECT_EQ(aborted.version, 2U);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
  // The trainer can begin its next round only once its broadcast of the aborted one has ended.
  const auto next = nextOutcome();
  EXPECT_NE(next.version, 0U) << "no round after the abort";
  EXPECT_LT(next.at - aborted.at, kAbortBound) << next.detail;
  victim.signal(SIGKILL);
  EXPECT_EQ(victim.wait(kPatience), 128 + SIGKILL);
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 4) << "one of its steps was aborted";
}

// Killed instead, the worker's sockets close: NCCL's own error or the coordinator's abort ends the broadcast,
// whichever comes first, and a worker that comes back catches up (its applied version reaches the control block
// through its reports).
TEST_F(NcclAcrossHosts, ARemoteWorkerKilledMidTransferCostsOneRoundAndAReplacementCatchesUp) {
  if (auto why = missing()) GTEST_SKIP() << *why;
  startBus();
  auto victim = startRemoteWorker("victim", {"--fault", "kill@transfer:2"});
  waitForAgents(1);
  auto trainer = startRemoteTrainer(0, 200);
  ASSERT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  ASSERT_FALSE(aborted.committed) << "version 2 reached a worker that died receiving it";
  EXPECT_EQ(aborted.version, 2U);
  EXPECT_TRUE(aborted.reason == msg::AbortReason::AgentDied || aborted.reason == msg::AbortReason::ChannelFailure)
      << aborted.detail;
  const auto next = nextOutcome();
  EXPECT_LT(next.at - aborted.at, kAbortBound) << next.detail;
  EXPECT_EQ(victim.wait(kPatience), 128 + SIGKILL);
  auto back = startRemoteWorker("back");
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  bool caughtUp = false;
  while (!caughtUp && std::chrono::steady_clock::now() < deadline) {
    const auto outcome = nextOutcome();
    ASSERT_NE(outcome.version, 0U) << "no round outcome";
    caughtUp = outcome.committed && appliedVersion("back").value_or(0) > 2;
  }
  EXPECT_TRUE(caughtUp) << "the worker that came back never caught up";
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 4) << "one of its steps was aborted";
}

}  // namespace
}  // namespace wsync::test
