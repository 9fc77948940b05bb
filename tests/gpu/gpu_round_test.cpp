// Update rounds over the GPU channels with the real programs: wsync-coordinator hands out the NCCL unique id and
// ranks (or the cuda_ipc segment), wsync-trainer publishes from GPU memory, wsync-worker receives into its GPU
// weights in place. Every committed version must reach the workers byte for byte; a worker killed in the middle of
// a transfer must abort that round within the named timeouts, and the next round must commit without it (for
// nccl: on a communicator the coordinator rebuilt with a new unique id).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "gpu_peers.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/channel/nccl/nccl_channel.hpp"

namespace wsync::test {
namespace {

// Small buckets, so that opt-125m (250 MB) is cut into many, packed ones among them.
constexpr const char* kBucketMiB = "16";
constexpr const char* kModel = "opt-125m";
// A dead worker is noticed by its heartbeat (the fixture's timeout) or its process (at once); the survivors' GPU
// transfers then end through their cancel probe. Well under the stall watchdog: the probe, not the watchdog, must
// end them.
constexpr std::chrono::milliseconds kAbortBound = std::chrono::milliseconds{bus::gpu::kNcclStallTimeout} / 2;

class GpuRound : public RoundFixture, public testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // the lent machines' rule (their KINDS.md); inherited by the programs
    RoundFixture::SetUp();
  }

  bool nccl() const { return GetParam() == "nccl"; }

  // nccl needs a GPU per rank (NCCL refuses two ranks on one device); cuda_ipc runs any number of workers on one
  // GPU and spreads them over the others when there are more.
  std::optional<std::string> missing(int workers) const {
    return nccl() ? missingNcclGpus(workers + 1) : missingGpus(1);
  }
  int workersFor(int wanted) const { return nccl() ? std::min(wanted, visibleGpus() - 1) : wanted; }
  int workerDevice(int index) const {
    const int gpus = visibleGpus();
    return nccl() ? 1 + index : (gpus == 1 ? 0 : 1 + index % (gpus - 1));
  }
  std::vector<std::string> gpuArgs(int device) const {
    return {"--channel", GetParam(), "--cuda-device", std::to_string(device)};
  }
  ChildProcess startGpuWorker(const std::string& id, int index, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--model", kModel, "--dump", path(id + ".safetensors")};
    for (auto& arg : gpuArgs(workerDevice(index))) args.push_back(arg);
    args.insert(args.end(), extra.begin(), extra.end());
    return startWorker(id, args);
  }
  ChildProcess startGpuTrainer(std::uint64_t steps, std::uint64_t intervalMs = 0, const std::string& id = "t0",
                               const std::string& seed = "1") {
    std::vector<std::string> args{"--model",       kModel,
                                  "--steps",       std::to_string(steps),
                                  "--dump",        path("trainer.safetensors"),
                                  "--interval-ms", std::to_string(intervalMs),
                                  "--seed",        seed};
    for (auto& arg : gpuArgs(0)) args.push_back(arg);
    return startTrainer(id, args);
  }
  // Stops a worker (it dumps its GPU weights as it exits) and checks they are the trainer's last version.
  void expectHoldsTrainersBytes(ChildProcess& worker, const std::string& id) {
    worker.signal(SIGTERM);
    EXPECT_EQ(worker.wait(kPatience), 0) << id;
    const std::string trainer = readTextFile(path("trainer.safetensors"));
    const std::string held = readTextFile(path(id + ".safetensors"));
    ASSERT_FALSE(trainer.empty());
    EXPECT_TRUE(trainer == held) << id << " does not hold the trainer's last committed version byte for byte";
  }
};

TEST_P(GpuRound, EveryCommittedVersionReachesTheWorkersByteForByte) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  const int count = workersFor(2);
  startCoordinator({"--gpu-bucket-mib", kBucketMiB});
  std::vector<ChildProcess> running;
  for (int index = 0; index < count; ++index) running.push_back(startGpuWorker("w" + std::to_string(index), index));
  waitForAgents(static_cast<std::uint32_t>(count));
  auto trainer = startGpuTrainer(3);
  for (int round = 1; round <= 3; ++round) {
    const auto outcome = nextOutcome();
    ASSERT_TRUE(outcome.committed) << "round " << round << ": " << outcome.detail;
    EXPECT_EQ(outcome.version, static_cast<std::uint64_t>(round));
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  for (int index = 0; index < count; ++index) {
    expectHoldsTrainersBytes(running[static_cast<std::size_t>(index)], "w" + std::to_string(index));
  }
}

// A worker outlives its trainer: a second trainer process (other content) publishes to it. Found by the Python
// publish benchmark on an H100: a cuda_ipc receiver took the new sender's first export (generation 1 of a
// per-process count) for the one it had imported, and went on copying out of the first trainer's memory while
// every round committed (with one receiver, no digest disagrees). The worker must hold the second trainer's bytes.
TEST_P(GpuRound, AWorkerThatOutlivesItsTrainerTakesTheNextTrainersBytes) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  startCoordinator({"--gpu-bucket-mib", kBucketMiB});
  auto worker = startGpuWorker("w0", 0);
  waitForAgents(1);
  auto first = startGpuTrainer(2, 0, "t0", "1");
  for (int round = 1; round <= 2; ++round) ASSERT_TRUE(nextOutcome().committed) << "first trainer, round " << round;
  ASSERT_EQ(first.wait(kPatience), 0);
  auto second = startGpuTrainer(2, 0, "t1", "2");
  for (int round = 1; round <= 2; ++round) {
    const auto outcome = nextOutcome();
    ASSERT_TRUE(outcome.committed) << "second trainer, round " << round << ": " << outcome.detail;
    EXPECT_EQ(outcome.version, static_cast<std::uint64_t>(2 + round));
  }
  ASSERT_EQ(second.wait(kPatience), 0);
  expectHoldsTrainersBytes(worker, "w0");
}

TEST_P(GpuRound, AWorkerKilledMidTransferAbortsTheRoundAndTheNextCommitsWithoutItThenWithItRestarted) {
  // nccl: a survivor and the victim, each on its own GPU besides the trainer's.
  if (auto why = missing(2)) GTEST_SKIP() << *why;
  startCoordinator({"--gpu-bucket-mib", kBucketMiB});
  auto survivor = startGpuWorker("survivor", 0);
  // Struck after its first bucket (nccl); cuda_ipc reports its one copy only when it is done, so there the victim
  // dies between its copy and its UpdateDone.
  std::optional<ChildProcess> victim = startGpuWorker("victim", 1, {"--fault", "kill@transfer:2"});
  waitForAgents(2);
  // Version 1, version 2 (aborted), version 2 again, then more, until the restarted victim has caught up.
  auto trainer = startGpuTrainer(0, 200);
  ASSERT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  ASSERT_FALSE(aborted.committed) << "version 2 reached a worker that died receiving it";
  EXPECT_EQ(aborted.version, 2U);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
  EXPECT_TRUE(aborted.reachedTransfer);
  // The trainer tries version 2 again with the survivor alone (for nccl on a new communicator). It can only begin
  // once the trainer's and the survivor's transfers of the aborted round have ended: through their cancel probe,
  // well before the stall watchdog would have ended them.
  const auto retried = nextOutcome();
  ASSERT_TRUE(retried.committed) << retried.detail;
  EXPECT_EQ(retried.version, 2U);
  EXPECT_LT(retried.at - aborted.at, kAbortBound);
  EXPECT_EQ(victim->wait(kPatience), 128 + SIGKILL);
  // Restarted, the victim joins the next round: for nccl a third member, so a new communicator of three ranks.
  victim.reset();
  victim.emplace(startGpuWorker("victim", 1));
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  bool caughtUp = false;
  while (!caughtUp && std::chrono::steady_clock::now() < deadline) {
    const auto outcome = nextOutcome();
    ASSERT_NE(outcome.version, 0U) << "no round outcome";
    ASSERT_TRUE(outcome.committed) << outcome.detail;
    caughtUp = appliedVersion("victim").value_or(0) > 2;
  }
  ASSERT_TRUE(caughtUp) << "the restarted victim never caught up";
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 4) << "one of its steps was aborted";
  expectHoldsTrainersBytes(survivor, "survivor");
  expectHoldsTrainersBytes(*victim, "victim");
}

INSTANTIATE_TEST_SUITE_P(Channels, GpuRound, testing::Values("nccl", "cuda_ipc"),
                         [](const testing::TestParamInfo<std::string>& param) { return param.param; });

}  // namespace
}  // namespace wsync::test
