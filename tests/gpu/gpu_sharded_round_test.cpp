// Region rounds over cuda_ipc with the real programs, every process on one GPU (docs/regions.md): a trainer of two
// ranks, each exporting only its rows of every tensor from GPU memory (wsync-trainer --shard), to a tensor-parallel
// engine of two workers receiving only their columns into their GPU weights (wsync-worker --slice), beside a worker
// that takes the whole model. Each worker opens both ranks' memory and copies from both; every worker must hold
// exactly its part of the last committed version; a spoiled slice and a rank killed mid-transfer abort their round
// naming the worker or the rank, and the next round commits.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "gpu_peers.hpp"
#include "round_fixture.hpp"
#include "weight_dumps.hpp"

namespace wsync::test {
namespace {

class GpuShardedRound : public RoundFixture {
 protected:
  void SetUp() override {
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // the lent machines' rule (their KINDS.md); inherited by the programs
    RoundFixture::SetUp();
  }

  static std::vector<std::string> onGpu(std::vector<std::string> args) {
    args.insert(args.end(), {"--channel", "cuda_ipc", "--cuda-device", "0"});
    return args;
  }
  void startWorkers() {
    workers_.push_back(startWorker("tp0", onGpu({"--slice", "0/2", "--dump", path("tp0.safetensors")})));
    workers_.push_back(startWorker("tp1", onGpu({"--slice", "1/2", "--dump", path("tp1.safetensors")})));
    workers_.push_back(startWorker("whole", onGpu({"--dump", path("whole.safetensors")})));
    waitForAgents(3);
  }
  void stopWorkers() {
    for (ChildProcess& worker : workers_) worker.signal(SIGTERM);
    for (ChildProcess& worker : workers_) ASSERT_EQ(worker.wait(kPatience), 0);
  }
  void expectEveryWorkersPart(std::uint64_t version) {
    expectSlicedWeights(path("trainer.safetensors"), path("tp0.safetensors"), version, cli::Part{0, 2});
    expectSlicedWeights(path("trainer.safetensors"), path("tp1.safetensors"), version, cli::Part{1, 2});
    expectSameWeights(path("trainer.safetensors"), path("whole.safetensors"), version);
  }

  std::vector<ChildProcess> workers_;
};

TEST_F(GpuShardedRound, EveryWorkerHoldsExactlyItsSliceOfEveryRanksShards) {
  if (auto why = missingGpus(1)) GTEST_SKIP() << *why;
  startCoordinator();
  startWorkers();
  auto rank0 = startTrainer("t0", onGpu({"--shard", "0/2", "--steps", "3", "--dump", path("trainer.safetensors")}));
  auto rank1 = startTrainer("t1", onGpu({"--shard", "1/2", "--steps", "3"}));
  for (std::uint64_t version = 1; version <= 3; ++version) {
    const auto outcome = nextOutcome();
    ASSERT_TRUE(outcome.committed) << "version " << version << ": " << outcome.detail;
    EXPECT_EQ(outcome.version, version);
  }
  EXPECT_EQ(rank0.wait(kPatience), 0);
  EXPECT_EQ(rank1.wait(kPatience), 0);
  for (const char* worker : {"tp0", "tp1", "whole"}) EXPECT_TRUE(waitForApplied(worker, 3)) << worker;
  stopWorkers();
  expectEveryWorkersPart(3);
}

// GPU workers receive in place (docs/decisions.md, "GPU workers receive in place"): a spoiled slice aborts its round
// naming the worker, every worker stays on version 1 (paused, its buffers torn), and the next committed round
// lands every worker's part whole.
TEST_F(GpuShardedRound, ASpoiledSliceAbortsItsRoundNamingItsWorkerAndTheNextRoundLandsEveryPart) {
  if (auto why = missingGpus(1)) GTEST_SKIP() << *why;
  startCoordinator();
  workers_.push_back(
      startWorker("tp0", onGpu({"--slice", "0/2", "--dump", path("tp0.safetensors"), "--fault", "corrupt-receive@2"})));
  workers_.push_back(startWorker("tp1", onGpu({"--slice", "1/2", "--dump", path("tp1.safetensors")})));
  workers_.push_back(startWorker("whole", onGpu({"--dump", path("whole.safetensors")})));
  waitForAgents(3);
  auto rank0 = startTrainer("t0", onGpu({"--shard", "0/2", "--steps", "3", "--dump", path("trainer.safetensors")}));
  auto rank1 = startTrainer("t1", onGpu({"--shard", "1/2", "--steps", "3"}));
  ASSERT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.version, 2U);
  EXPECT_EQ(aborted.reason, msg::AbortReason::DigestMismatch) << aborted.detail;
  EXPECT_EQ(aborted.agentId, "tp0");
  // Both ranks publish version 2 again, and it commits.
  const auto next = nextOutcome();
  ASSERT_TRUE(next.committed) << next.detail;
  EXPECT_EQ(next.version, 2U);
  rank0.wait(kPatience);
  rank1.wait(kPatience);
  for (const char* worker : {"tp0", "tp1", "whole"}) EXPECT_TRUE(waitForApplied(worker, next.version)) << worker;
  stopWorkers();
  expectEveryWorkersPart(next.version);
}

TEST_F(GpuShardedRound, ARankKilledMidTransferLeavesEveryWorkerOnThePreviousVersionAndTheNextCommits) {
  if (auto why = missingGpus(1)) GTEST_SKIP() << *why;
  startCoordinator();
  startWorkers();
  auto rank0 = startTrainer("t0", onGpu({"--shard", "0/2", "--steps", "1", "--dump", path("trainer.safetensors")}));
  auto doomed = startTrainer("t1", onGpu({"--shard", "1/2", "--steps", "3", "--fault", "kill@transfer:2"}));
  ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(rank0.wait(kPatience), 0);
  // Rank 1 begins version 2 and dies in its transfer (cuda_ipc reports once, when every receiver has copied), or
  // waits in vain for rank 0: either way version 2 is not committed, and the round names rank 1.
  auto late = startTrainer("t0", onGpu({"--shard", "0/2", "--steps", "1", "--first-version", "2"}));
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.version, 2U);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
  EXPECT_EQ(aborted.agentId, "t1");
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL);
  late.wait(kPatience);
  for (const char* worker : {"tp0", "tp1", "whole"}) EXPECT_EQ(appliedVersion(worker), 1U) << worker;
  // Two fresh ranks publish version 2: the workers drop what they held of the dead rank's memory and take it.
  auto again0 = startTrainer(
      "t0", onGpu({"--shard", "0/2", "--steps", "1", "--first-version", "2", "--dump", path("trainer.safetensors")}));
  auto again1 = startTrainer("t1", onGpu({"--shard", "1/2", "--steps", "1", "--first-version", "2"}));
  const auto retried = nextOutcome();
  ASSERT_TRUE(retried.committed) << retried.detail;
  EXPECT_EQ(retried.version, 2U);
  EXPECT_EQ(again0.wait(kPatience), 0);
  EXPECT_EQ(again1.wait(kPatience), 0);
  for (const char* worker : {"tp0", "tp1", "whole"}) EXPECT_TRUE(waitForApplied(worker, 2)) << worker;
  stopWorkers();
  expectEveryWorkersPart(2);
}

}  // namespace
}  // namespace wsync::test
