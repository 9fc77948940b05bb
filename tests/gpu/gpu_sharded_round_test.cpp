// Region rounds over the GPU channels with the real programs, every process on one GPU (docs/regions.md): a trainer
// of two ranks, each sending only its rows of every tensor from GPU memory (wsync-trainer --shard), to a
// tensor-parallel engine of two workers receiving only their columns into their GPU weights (wsync-worker --slice),
// beside a worker that takes the whole model. On cuda_ipc each worker opens both ranks' memory and copies from both;
// on nccl every rank and worker is a node of its own to NCCL (its socket transport over the loopback, as between
// hosts), and each pair's pieces go point to point. Every worker must hold exactly its part of the last committed
// version; a spoiled slice and a rank killed mid-transfer abort their round naming the worker or the rank, and the
// next round commits.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu_peers.hpp"
#include "round_fixture.hpp"
#include "weight_dumps.hpp"
#include "wsync/bus/channel/nccl/nccl_channel.hpp"

namespace wsync::test {
namespace {

// NCCL over sockets on the loopback, for every program of an nccl test: several ranks on one GPU.
constexpr std::pair<const char*, const char*> kSocketsOnly[] = {
    {"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}, {"NCCL_SOCKET_IFNAME", "lo"}};

class GpuShardedRound : public RoundFixture, public testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // the lent machines' rule (their KINDS.md); inherited by the programs
    if (nccl()) {
      for (const auto& [name, value] : kSocketsOnly) ::setenv(name, value, 1);
    }
    RoundFixture::SetUp();
  }
  void TearDown() override {
    RoundFixture::TearDown();
    for (const auto& [name, value] : kSocketsOnly) ::unsetenv(name);
    ::unsetenv("NCCL_HOSTID");
  }
  bool nccl() const { return GetParam() == "nccl"; }
  std::optional<std::string> missing() const {
    if (auto why = missingGpus(1)) return why;
    if (nccl()) {
      if (auto version = bus::gpu::ncclVersion(); !version)
        return "NCCL cannot be loaded: " + version.error().describe();
    }
    return std::nullopt;
  }

  std::vector<std::string> onGpu(std::vector<std::string> args) const {
    args.insert(args.end(), {"--channel", GetParam(), "--cuda-device", "0"});
    return args;
  }
  // Each program a node of its own to NCCL (NCCL refuses two ranks of one host on one GPU), under a host id no
  // other program of the test had: a restarted rank is a new node.
  ChildProcess startWorker(const std::string& id, const std::vector<std::string>& args) {
    nameNcclHost(id);
    return RoundFixture::startWorker(id, args);
  }
  ChildProcess startTrainer(const std::string& id, const std::vector<std::string>& args) {
    nameNcclHost(id);
    return RoundFixture::startTrainer(id, args);
  }
  void nameNcclHost(const std::string& id) {
    ::setenv("NCCL_HOSTID", ("wsync-test-" + id + "-" + std::to_string(started_++)).c_str(), 1);
  }
  // `args` on the GPU, with `extra` after them.
  std::vector<std::string> onGpu(std::vector<std::string> args, const std::vector<std::string>& extra) const {
    args.insert(args.end(), extra.begin(), extra.end());
    return onGpu(std::move(args));
  }
  void startWorkers(const std::vector<std::string>& extra = {}) {
    workers_.push_back(startWorker("tp0", onGpu({"--slice", "0/2", "--dump", path("tp0.safetensors")}, extra)));
    workers_.push_back(startWorker("tp1", onGpu({"--slice", "1/2", "--dump", path("tp1.safetensors")}, extra)));
    workers_.push_back(startWorker("whole", onGpu({"--dump", path("whole.safetensors")}, extra)));
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

  // Two ranks publish versions 1..`versions`: each commits, and every worker ends with exactly its part of the last.
  void expectVersionsCommittedInEveryPart(std::uint64_t versions, const std::vector<std::string>& extra = {}) {
    const std::string steps = std::to_string(versions);
    auto rank0 =
        startTrainer("t0", onGpu({"--shard", "0/2", "--steps", steps, "--dump", path("trainer.safetensors")}, extra));
    auto rank1 = startTrainer("t1", onGpu({"--shard", "1/2", "--steps", steps}, extra));
    for (std::uint64_t version = 1; version <= versions; ++version) {
      const auto outcome = nextOutcome();
      ASSERT_TRUE(outcome.committed) << "version " << version << ": " << outcome.detail;
      EXPECT_EQ(outcome.version, version);
    }
    EXPECT_EQ(rank0.wait(kPatience), 0);
    EXPECT_EQ(rank1.wait(kPatience), 0);
    for (const char* worker : {"tp0", "tp1", "whole"}) EXPECT_TRUE(waitForApplied(worker, versions)) << worker;
    stopWorkers();
    expectEveryWorkersPart(versions);
  }

  std::vector<ChildProcess> workers_;
  int started_ = 0;
};

TEST_P(GpuShardedRound, EveryWorkerHoldsExactlyItsSliceOfEveryRanksShards) {
  if (auto why = missing()) GTEST_SKIP() << *why;
  startCoordinator();
  startWorkers();
  expectVersionsCommittedInEveryPart(3);
}

// A model of 250 MB through buckets of 16 MiB: on nccl each pair's stream is many steps, so the sources pack a step
// while the one before is on the wire, the workers unpack one while the next arrives, and the staging buffers are
// taken in turn (region_steps.hpp).
TEST_P(GpuShardedRound, EveryWorkerHoldsExactlyItsSliceOfALargerModelThroughManySteps) {
  if (auto why = missing()) GTEST_SKIP() << *why;
  startCoordinator({"--gpu-bucket-mib", "16"});
  const std::vector<std::string> model{"--model", "opt-125m"};
  startWorkers(model);
  expectVersionsCommittedInEveryPart(2, model);
}

// GPU workers receive in place (docs/decisions.md, "GPU workers receive in place"): a spoiled slice aborts its round
// naming the worker, every worker stays on version 1 (paused, its buffers torn), and the next committed round
// lands every worker's part whole.
TEST_P(GpuShardedRound, ASpoiledSliceAbortsItsRoundNamingItsWorkerAndTheNextRoundLandsEveryPart) {
  if (auto why = missing()) GTEST_SKIP() << *why;
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

TEST_P(GpuShardedRound, ARankKilledMidTransferLeavesEveryWorkerOnThePreviousVersionAndTheNextCommits) {
  if (auto why = missing()) GTEST_SKIP() << *why;
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

INSTANTIATE_TEST_SUITE_P(Channels, GpuShardedRound, testing::Values("cuda_ipc", "nccl"),
                         [](const testing::TestParamInfo<std::string>& param) { return param.param; });

}  // namespace
}  // namespace wsync::test
