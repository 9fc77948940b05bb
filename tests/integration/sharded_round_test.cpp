// Region rounds end to end with the real binaries (docs/regions.md), over shm and over tcp: a trainer of two ranks,
// each publishing only its rows of every tensor (wsync-trainer --shard), to a tensor-parallel engine of two workers,
// each receiving only its columns (wsync-worker --slice), beside a worker that takes the whole model. Every worker must
// hold exactly its part of the trainer's last committed version, and a round that loses a rank, a corrupted slice or a
// rank that never begins must leave every worker on the version before.
#include <csignal>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "region_round_fixture.hpp"

namespace wsync::test {
namespace {

using ::testing::HasSubstr;

// Each case runs on every host channel that carries region rounds.
class ShardedRound : public RegionRoundFixture, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    channel_ = GetParam();
    RegionRoundFixture::SetUp();
  }
};

TEST_P(ShardedRound, EveryWorkerHoldsExactlyItsSliceOfEveryRanksShards) {
  startCoordinator();
  startWorkers();
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "3", "--dump", path("trainer.safetensors")});
  auto rank1 = startRank("t1", {"--shard", "1/2", "--steps", "3"});
  for (std::uint64_t version = 1; version <= 3; ++version) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    EXPECT_EQ(outcome.version, version);
  }
  EXPECT_EQ(rank0.wait(kPatience), 0);
  EXPECT_EQ(rank1.wait(kPatience), 0);
  for (const char* worker : kWorkerIds) EXPECT_TRUE(waitForApplied(worker, 3)) << worker;
  stopWorkers();
  expectEveryWorkersPart(3);
}

// A trainer that holds the whole model, to an engine that binds slices: the round is a region round of one source.
TEST_P(ShardedRound, AWholeTrainerFeedsSlicedWorkersTheirSlicesOnly) {
  startCoordinator();
  startWorkers();
  auto trainer = startRank("t0", {"--steps", "2", "--dump", path("trainer.safetensors")});
  for (std::uint64_t version = 1; version <= 2; ++version) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  for (const char* worker : kWorkerIds) EXPECT_TRUE(waitForApplied(worker, 2)) << worker;
  stopWorkers();
  expectEveryWorkersPart(2);
}

TEST_P(ShardedRound, ARankKilledMidTransferLeavesEveryWorkerOnThePreviousVersion) {
  startCoordinator();
  startWorkers();
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "1", "--dump", path("trainer.safetensors")});
  auto doomed = startRank("t1", {"--shard", "1/2", "--steps", "3", "--fault", "kill@transfer:2"});
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_EQ(rank0.wait(kPatience), 0);
  // Rank 0 has stopped after version 1; rank 1 begins version 2 alone and dies after its first bucket, or waits in
  // vain for rank 0: either way version 2 is never committed, and the round names rank 1 or the missing rank 0.
  auto late = startRank("t0", {"--shard", "0/2", "--steps", "1", "--first-version", "2"});
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.version, 2U);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
  EXPECT_EQ(aborted.agentId, "t1");
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL);
  late.wait(kPatience);
  expectEveryWorkerOn(1);
  stopWorkers();
  expectEveryWorkersPart(1);
}

TEST_P(ShardedRound, ASpoiledSliceIsNeverAppliedAndTheRoundNamesItsWorker) {
  startCoordinator();
  startWorkers({"--fault", "corrupt-receive@2"});
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "2", "--dump", path("trainer.safetensors")});
  auto rank1 = startRank("t1", {"--shard", "1/2", "--steps", "2"});
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::DigestMismatch);
  EXPECT_EQ(aborted.agentId, "tp0");
  EXPECT_THAT(aborted.detail, HasSubstr("trainer rank"));
  rank0.wait(kPatience);
  rank1.wait(kPatience);
  expectEveryWorkerOn(1);
  stopWorkers();
  expectEveryWorkersPart(1);
}

// The coordinator killed after it committed a region round and before it told anyone: the block says the round
// committed, and every worker applies the slices it staged once the next coordinator welcomes it.
TEST_P(ShardedRound, ACommitWhoseCoordinatorDiedBeforeTellingIsAppliedByEveryWorker) {
  startCoordinator({"--fault", "kill@commit:2"});
  startWorkers();
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "2", "--dump", path("trainer.safetensors")});
  auto rank1 = startRank("t1", {"--shard", "1/2", "--steps", "2"});
  ASSERT_EQ(coordinator_->wait(kPatience), 128 + SIGKILL) << "the commit fault never struck";
  startCoordinator();
  EXPECT_EQ(block_->committedVersion(), 2U);
  for (const char* worker : kWorkerIds) EXPECT_TRUE(waitForApplied(worker, 2)) << worker;
  EXPECT_EQ(rank0.wait(kPatience), 0) << "each rank must learn that version 2 was committed";
  EXPECT_EQ(rank1.wait(kPatience), 0);
  stopWorkers();
  expectEveryWorkersPart(2);
}

TEST_P(ShardedRound, ARankThatNeverBeginsIsNamedAndNoEnginePauses) {
  startCoordinator({"--sources-timeout-ms", "500"});
  startWorkers();
  auto lonely = startRank("t0", {"--shard", "0/2", "--steps", "1"});
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::Timeout);
  EXPECT_THAT(aborted.detail, HasSubstr("trainer rank 1 (it never began version 1)"));
  EXPECT_FALSE(aborted.reachedTransfer);
  EXPECT_EQ(lonely.wait(kPatience), 4) << "the trainer reports a version that was not committed";
  stopWorkers();
}

std::string channelName(const ::testing::TestParamInfo<const char*>& param) { return param.param; }

INSTANTIATE_TEST_SUITE_P(HostChannels, ShardedRound, ::testing::Values("shm", "tcp"), channelName);

}  // namespace
}  // namespace wsync::test
