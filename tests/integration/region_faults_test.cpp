// Region rounds that must fail, with the real programs (docs/faults.md, "Region rounds"): a rank whose rows overlap
// another rank's, rows that no rank holds, a worker binding columns that no source holds, ranks that begin different
// versions, a rank missing for a version and a rank frozen past the transfer deadline. Each round ends with its named
// reason and commits nothing, every worker keeps serving the version before, and the next round, of good ranks,
// commits: every worker then holds exactly its part of that version.
#include <chrono>
#include <csignal>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "region_round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

using ::testing::HasSubstr;

// The gather of a version's ranks: long enough for two ranks started one after the other on a loaded 2-core machine,
// short enough that a rank missing for a version is named within seconds (the default is 30 s).
constexpr std::chrono::milliseconds kSourcesTimeout{3000};
// The transfer's base allowance where a rank freezes: a round of the tiny model takes milliseconds, so one second is
// far past it, and the test waits one second instead of the default two minutes.
constexpr std::chrono::milliseconds kTransferDeadline{1000};
// Longer than the transfer deadline, so that the frozen rank's silent heartbeat cannot end the round first.
constexpr std::chrono::milliseconds kHeartbeatOutlastingTheDeadline{8000};
// wsync-trainer's exit status when one of its versions was not committed.
constexpr int kTrainerNotCommitted = 4;

std::string millis(std::chrono::milliseconds duration) { return std::to_string(duration.count()); }

class RegionFaults : public RegionRoundFixture {
 protected:
  // The coordinator (its gather shortened, plus `coordinatorArgs`) and the engine.
  void startBus(std::vector<std::string> coordinatorArgs = {}) {
    coordinatorArgs.insert(coordinatorArgs.end(), {"--sources-timeout-ms", millis(kSourcesTimeout)});
    startCoordinator(coordinatorArgs);
    startWorkers();
  }
  // Version 1 from two good ranks: the version every worker must go on serving through the fault.
  void commitTheVersionBefore(const std::vector<std::string>& coordinatorArgs = {}) {
    startBus(coordinatorArgs);
    auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "1"});
    auto rank1 = startRank("t1", {"--shard", "1/2", "--steps", "1"});
    const auto outcome = nextOutcome();
    ASSERT_TRUE(outcome.committed) << outcome.detail;
    ASSERT_EQ(outcome.version, 1U);
    EXPECT_EQ(rank0.wait(kPatience), 0);
    EXPECT_EQ(rank1.wait(kPatience), 0);
    for (const char* worker : kWorkerIds) ASSERT_TRUE(waitForApplied(worker, 1)) << worker;
  }
  // The faulted round's outcome: `version` aborted for `reason`, nothing committed since version 1, and every worker
  // still serving version 1.
  RoundOutcome expectAborted(std::uint64_t version, msg::AbortReason reason) {
    const RoundOutcome outcome = nextOutcome();
    EXPECT_FALSE(outcome.committed) << "version " << outcome.version << " committed";
    EXPECT_EQ(outcome.version, version);
    EXPECT_EQ(outcome.reason, reason) << outcome.detail;
    EXPECT_EQ(block_->committedVersion(), 1U);
    expectEveryWorkerOn(1);
    return outcome;
  }
  // Two good ranks publish `version` after the fault, and it is the next outcome on the bus: committed, with nothing
  // committed in between. It is above the aborted version, so that a dump of the aborted version, had any worker
  // applied it, could not pass for the good one. Every worker then holds exactly its part of it.
  void expectTheNextRoundCommits(std::uint64_t version) {
    const std::string first = std::to_string(version);
    auto rank0 = startRank(
        "t0", {"--shard", "0/2", "--steps", "1", "--first-version", first, "--dump", path("trainer.safetensors")});
    auto rank1 = startRank("t1", {"--shard", "1/2", "--steps", "1", "--first-version", first});
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    EXPECT_EQ(outcome.version, version);
    EXPECT_EQ(rank0.wait(kPatience), 0);
    EXPECT_EQ(rank1.wait(kPatience), 0);
    for (const char* worker : kWorkerIds) EXPECT_TRUE(waitForApplied(worker, version)) << worker;
    stopWorkers();
    expectEveryWorkersPart(version);
  }
  // Rank 1 of version 2 started with `skew` (--shard-skew): the layout is refused before any engine pauses, with
  // `named` in the abort's text and the rank's log; the next round commits.
  void expectASkewedRankRefused(const std::string& skew, const std::string& named) {
    ASSERT_NO_FATAL_FAILURE(commitTheVersionBefore());
    auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "1"});
    auto skewed = startRank("t1", {"--shard", "1/2", "--steps", "1", "--shard-skew=" + skew}, path("t1.log"));
    const auto aborted = expectAborted(2, msg::AbortReason::LayoutMismatch);
    EXPECT_THAT(aborted.detail, HasSubstr(named));
    EXPECT_FALSE(aborted.reachedTransfer) << "refused before any engine paused";
    EXPECT_EQ(rank0.wait(kPatience), kTrainerNotCommitted);
    EXPECT_EQ(skewed.wait(kPatience), kTrainerNotCommitted);
    EXPECT_THAT(readTextFile(path("t1.log")), HasSubstr("version 2 aborted: LayoutMismatch: " + named));
    expectTheNextRoundCommits(3);
  }
  // Until `agentId` holds no slot: an agent that left must not be a participant of the next round.
  bool waitForGone(const std::string& agentId) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (appliedVersion(agentId)) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
};

// Rank 1 holds one row of rank 0's too (--shard-skew 1): a partial overlap, which no sharding makes.
TEST_F(RegionFaults, ARankWhoseRowsOverlapAnotherRanksIsRefusedNamingBothAndTheRows) {
  expectASkewedRankRefused(
      "1",
      "overlapping regions: trainer rank 0 ('t0') holds region [0:32, 0:16] and trainer rank 1 ('t1') region [31:64, "
      "0:16] of tensor 'embed.weight' [64, 16]: they overlap in [31:32, 0:16] but differ");
}

// Rank 1's rows begin one later (--shard-skew -1): the row between the ranks is held by none.
TEST_F(RegionFaults, RowsThatNoRankHoldsAreRefusedNamingTheTensorAndTheRows) {
  expectASkewedRankRefused("-1", "gap: no source holds region [32:33, 0:16] of tensor 'embed.weight' [64, 16]");
}

// A fourth worker binds tp1's columns one further on (--slice-skew 1): its last column is past the tensor's end, a
// region that no source holds. The round names it as the agent to fix; once it has gone, the next round commits.
TEST_F(RegionFaults, AWorkerBindingColumnsThatNoSourceHoldsIsRefusedNamingIt) {
  ASSERT_NO_FATAL_FAILURE(commitTheVersionBefore());
  auto stray = startWorker("stray", {"--slice", "1/2", "--slice-skew", "1"});
  ASSERT_TRUE(waitForApplied("stray", 0)) << "the stray worker never registered";
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "1"}, path("t0.log"));
  auto rank1 = startRank("t1", {"--shard", "1/2", "--steps", "1"});
  const auto aborted = expectAborted(2, msg::AbortReason::ManifestMismatch);
  const std::string outside =
      "region outside the tensor: worker 'stray' binds region [0:64, 9:17] of tensor 'embed.weight' [64, 16]: the "
      "region is outside the tensor (no source holds it)";
  EXPECT_EQ(aborted.agentId, "stray");
  EXPECT_THAT(aborted.detail, HasSubstr(outside));
  EXPECT_FALSE(aborted.reachedTransfer) << "refused before any engine paused";
  EXPECT_EQ(appliedVersion("stray"), 0U);
  EXPECT_EQ(rank0.wait(kPatience), kTrainerNotCommitted);
  EXPECT_EQ(rank1.wait(kPatience), kTrainerNotCommitted);
  EXPECT_THAT(readTextFile(path("t0.log")), HasSubstr("version 2 aborted: ManifestMismatch: " + outside));
  stray.signal(SIGTERM);
  EXPECT_EQ(stray.wait(kPatience), 0);
  ASSERT_TRUE(waitForGone("stray"));
  expectTheNextRoundCommits(3);
}

// Rank 0 begins version 2 and the round waits for rank 1, which begins version 3: the ranks are no one version.
TEST_F(RegionFaults, RanksThatBeginDifferentVersionsAbortTheRoundNamingBoth) {
  ASSERT_NO_FATAL_FAILURE(commitTheVersionBefore());
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "1"});
  ASSERT_TRUE(waitForRoundPhase(msg::RoundPhase::Begin)) << "rank 0 never began version 2";
  auto ahead = startRank("t1", {"--shard", "1/2", "--steps", "1", "--first-version", "3"}, path("t1.log"));
  const auto aborted = expectAborted(2, msg::AbortReason::LayoutMismatch);
  const std::string mismatch = "trainer rank 1 ('t1') began version 3, trainer rank 0 ('t0') 2";
  EXPECT_EQ(aborted.agentId, "t1");
  EXPECT_THAT(aborted.detail, HasSubstr(mismatch));
  EXPECT_FALSE(aborted.reachedTransfer) << "refused before any engine paused";
  EXPECT_EQ(rank0.wait(kPatience), kTrainerNotCommitted);
  EXPECT_EQ(ahead.wait(kPatience), kTrainerNotCommitted) << "the refused rank stops: its version is never accepted";
  const std::string refused = readTextFile(path("t1.log"));
  EXPECT_THAT(refused, HasSubstr(mismatch));
  EXPECT_THAT(refused, HasSubstr("version 3 will never be accepted; stopping"));
  expectTheNextRoundCommits(4);
}

// Rank 1 publishes one version (--steps 1), rank 0 two: version 2 has one rank of two, and the gather runs out.
TEST_F(RegionFaults, ARankMissingForAVersionIsNamedWhenTheGatherRunsOut) {
  startBus();
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "2"}, path("t0.log"));
  auto rank1 = startRank("t1", {"--shard", "1/2", "--steps", "1"});
  const auto first = nextOutcome();
  ASSERT_TRUE(first.committed) << first.detail;
  EXPECT_EQ(rank1.wait(kPatience), 0);
  for (const char* worker : kWorkerIds) ASSERT_TRUE(waitForApplied(worker, 1)) << worker;
  const auto aborted = expectAborted(2, msg::AbortReason::Timeout);
  const std::string missing = "phase Begin ran past its timeout; waiting for trainer rank 1 (it never began version 2)";
  EXPECT_THAT(aborted.detail, HasSubstr(missing));
  EXPECT_FALSE(aborted.reachedTransfer) << "no engine paused for half a version";
  EXPECT_EQ(rank0.wait(kPatience), kTrainerNotCommitted);
  EXPECT_THAT(readTextFile(path("t0.log")), HasSubstr("version 2 aborted: Timeout: " + missing));
  expectTheNextRoundCommits(3);
}

// Rank 1 stops itself (SIGSTOP) after its first bucket of version 2; its heartbeat outlasts the transfer deadline, so
// the deadline ends the round. Run on both host channels: the payload was moving when the rank froze.
class FrozenRank : public RegionFaults, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    channel_ = GetParam();
    RegionFaults::SetUp();
  }
};

TEST_P(FrozenRank, ARankFrozenPastTheTransferDeadlineAbortsTheRoundByThatDeadline) {
  ASSERT_NO_FATAL_FAILURE(commitTheVersionBefore({"--transfer-timeout-ms", millis(kTransferDeadline),
                                                  "--heartbeat-timeout-ms", millis(kHeartbeatOutlastingTheDeadline)}));
  auto rank0 = startRank("t0", {"--shard", "0/2", "--steps", "1"});
  auto frozen = startRank("t1", {"--shard", "1/2", "--steps", "1", "--fault", "stop@transfer:2"}, path("t1.log"));
  const auto aborted = expectAborted(2, msg::AbortReason::Timeout);
  EXPECT_THAT(aborted.detail, HasSubstr("phase Transfer ran past its timeout; waiting for "));
  EXPECT_THAT(aborted.detail, HasSubstr("trainer rank 1 ('t1')"));
  EXPECT_TRUE(aborted.reachedTransfer);
  EXPECT_EQ(rank0.wait(kPatience), kTrainerNotCommitted);
  frozen.signal(SIGCONT);  // thawed, it learns that its version was aborted
  EXPECT_EQ(frozen.wait(kPatience), kTrainerNotCommitted);
  EXPECT_THAT(readTextFile(path("t1.log")), HasSubstr("version 2 aborted: Timeout: phase Transfer ran past"));
  expectTheNextRoundCommits(3);
}

std::string channelName(const ::testing::TestParamInfo<const char*>& param) { return param.param; }

INSTANTIATE_TEST_SUITE_P(HostChannels, FrozenRank, ::testing::Values("shm", "tcp"), channelName);

}  // namespace
}  // namespace wsync::test
