// Rounds over the tcp payload channel with the real binaries on a tcp bus (docs/tcp-channel.md): versions reach
// every worker byte for byte, a worker or the trainer killed mid-transfer costs one round (blamed on the one that
// died, or on the trainer's channel naming the lost worker) and the next commits, and a corrupted receive is caught
// by the digests as on the shm channel.
#include <csignal>

#include <gtest/gtest.h>

#include "free_port.hpp"
#include "round_fixture.hpp"
#include "weight_dumps.hpp"

namespace wsync::test {
namespace {

class TcpRounds : public RoundFixture {
 protected:
  void SetUp() override {
    RoundFixture::SetUp();
    const int port = freePortPair();
    ASSERT_GT(port, 0);
    transport_ = "tcp://127.0.0.1:" + std::to_string(port);
    startCoordinator({"--transport", transport_, "--insecure"});
  }

  // An agent on the tcp bus with the tcp channel, plus `extra`.
  std::vector<std::string> agentArgs(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args{"--transport", transport_, "--channel", "tcp", "--model", kModel};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // Several buckets of the fixture's 1 MiB: a killed receiver goes while bytes still move.
  static constexpr const char* kModel = "synthetic:24:6";
};

TEST_F(TcpRounds, VersionsReachEveryWorkerByteForByte) {
  auto first = startWorker("w0", agentArgs({"--dump", path("w0.safetensors")}));
  auto second = startWorker("w1", agentArgs({"--dump", path("w1.safetensors")}));
  waitForAgents(2);
  auto trainer = startTrainer("t0", agentArgs({"--steps", "3", "--dump", path("trainer.safetensors")}),
                              path("trainer.log"));
  for (std::uint64_t version = 1; version <= 3; ++version) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    EXPECT_EQ(outcome.version, version);
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 3));
  EXPECT_TRUE(waitForApplied("w1", 3));
  first.signal(SIGTERM);
  second.signal(SIGTERM);
  ASSERT_EQ(first.wait(kPatience), 0);
  ASSERT_EQ(second.wait(kPatience), 0);

  for (const char* worker : {"w0.safetensors", "w1.safetensors"}) {
    expectSameWeights(path("trainer.safetensors"), path(worker), 3);
  }
}

TEST_F(TcpRounds, AWorkerKilledMidTransferCostsOneRoundAndTheNextCommits) {
  auto steady = startWorker("steady", agentArgs());
  auto doomed = startWorker("doomed", agentArgs({"--fault", "kill@transfer:2"}));
  waitForAgents(2);
  auto trainer = startTrainer("t0", agentArgs({"--steps", "0", "--interval-ms", "100"}));
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.version, 2U);
  // Whichever the coordinator hears first: the worker's death, or the trainer's channel naming the lost receiver;
  // never the other worker, whose connection the trainer keeps open until the round ends.
  if (aborted.reason == msg::AbortReason::ChannelFailure) {
    EXPECT_EQ(aborted.agentId, "t0");
    EXPECT_NE(aborted.detail.find("a peer is gone"), std::string::npos) << aborted.detail;
  } else {
    EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
    EXPECT_EQ(aborted.agentId, "doomed");
  }
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL);
  EXPECT_EQ(appliedVersion("steady"), 1U) << "the surviving worker keeps the previous version";
  RoundOutcome outcome;
  do {
    outcome = nextOutcome();
  } while (!outcome.committed && outcome.version != 0);
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_TRUE(waitForAppliedAtLeast("steady", outcome.version));
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 4) << "one of the trainer's steps was aborted";
}

// The workers lose their sender mid-transfer and wait for the round's end instead of reporting it: the abort names
// the trainer that died, not a worker that saw its connection close.
TEST_F(TcpRounds, ATrainerKilledMidTransferAbortsTheRoundInItsNameAndANewTrainerContinues) {
  auto worker = startWorker("w0", agentArgs());
  auto other = startWorker("w1", agentArgs());
  waitForAgents(2);
  auto doomed = startTrainer("t0", agentArgs({"--steps", "3", "--fault", "kill@transfer:2"}));
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
  EXPECT_EQ(aborted.agentId, "t0") << aborted.detail;
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL);
  EXPECT_EQ(appliedVersion("w0"), 1U);
  auto successor = startTrainer("t0", agentArgs({"--steps", "2"}));
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_EQ(successor.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 3));
  EXPECT_TRUE(waitForApplied("w1", 3));
}

TEST_F(TcpRounds, APayloadWhoseDigestDiffersIsNeverApplied) {
  auto honest = startWorker("honest", agentArgs());
  auto corrupted = startWorker("corrupted", agentArgs({"--fault", "corrupt-receive@2"}));
  waitForAgents(2);
  auto trainer = startTrainer("t0", agentArgs({"--steps", "2"}));
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::DigestMismatch) << aborted.detail;
  EXPECT_EQ(aborted.agentId, "corrupted");
  EXPECT_EQ(trainer.wait(kPatience), 4);
  EXPECT_EQ(appliedVersion("honest"), 1U);
  EXPECT_EQ(appliedVersion("corrupted"), 1U);
}

}  // namespace
}  // namespace wsync::test
