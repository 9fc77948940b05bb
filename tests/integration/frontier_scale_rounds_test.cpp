// Rounds of a frontier-MoE-sized manifest (issue 18) with the real coordinator, trainer and workers over shm: the
// GPU benchmarks move 100,000 tensors through the channels alone, so this is where the control plane meets that
// count (a manifest of 100,000 entries sent once per worker, checked against as many bindings, cut into buckets).
#include <csignal>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model_variant.hpp"
#include "round_fixture.hpp"
#include "weight_dumps.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/safetensors.hpp"

namespace wsync::test {
namespace {

// DeepSeek-V3's and Kimi-K2's checkpoints hold about 10^5 tensors, most of them small. 64 MiB keeps the rounds in
// CI's time on 2 cores.
constexpr const char* kFrontierModel = "synthetic:100000:64";
constexpr std::size_t kFrontierTensors = 100'000;

// Two workers take two versions; a third joins, has never seen the manifest, and takes the next version with them
// from another trainer process (the coordinator sends it that manifest, the other two get only its digest).
TEST_F(RoundFixture, AHundredThousandTensorsReachEveryWorkerByteForByteAndALateWorkerGetsTheManifest) {
  startCoordinator();
  std::vector<ChildProcess> workers;
  for (const char* id : {"w0", "w1"}) {
    workers.push_back(startWorker(id, {"--model", kFrontierModel, "--dump", path(std::string(id) + ".safetensors")}));
  }
  waitForAgents(2);
  auto first = startTrainer("t0", {"--model", kFrontierModel, "--steps", "2"});
  for (std::uint64_t version = 1; version <= 2; ++version) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    EXPECT_EQ(outcome.version, version);
  }
  ASSERT_EQ(first.wait(kPatience), 0);

  workers.push_back(startWorker("w2", {"--model", kFrontierModel, "--dump", path("w2.safetensors")}));
  waitForAgents(3);
  auto second = startTrainer("t1", {"--model", kFrontierModel, "--steps", "1", "--dump", path("trainer.safetensors")});
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(outcome.version, 3U);
  ASSERT_EQ(second.wait(kPatience), 0);
  for (const char* id : {"w0", "w1", "w2"}) EXPECT_TRUE(waitForApplied(id, 3)) << id;
  for (auto& worker : workers) worker.signal(SIGTERM);
  for (auto& worker : workers) ASSERT_EQ(worker.wait(kPatience), 0);
  auto trainerDump = cli::SafetensorsFile::open(path("trainer.safetensors"));
  ASSERT_TRUE(trainerDump) << trainerDump.error().describe();
  EXPECT_EQ(trainerDump->tensors().size(), kFrontierTensors);
  for (const char* id : {"w0", "w1", "w2"}) {
    expectSameWeights(path("trainer.safetensors"), path(std::string(id) + ".safetensors"), 3);
  }
}

// One tensor of 100,000 with another shape: the round fails before any byte moves, naming that tensor, and both
// workers keep what they had.
TEST_F(RoundFixture, OneShapeWrongAmongAHundredThousandTensorsFailsTheRoundAndNamesIt) {
  startCoordinator();
  std::string named;
  const std::string variant =
      writeModelVariant(path("variant.safetensors"), kFrontierModel, [&](std::vector<bus::TensorSpec>& specs) {
        auto& tensor = specs[kFrontierTensors - 2];
        tensor.shape.push_back(1);
        named = tensor.name;
      });
  auto good = startWorker("good", {"--model", kFrontierModel});
  auto bad = startWorker("bad", {"--model", variant});
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--model", kFrontierModel, "--steps", "1"});
  const auto outcome = nextOutcome();
  EXPECT_FALSE(outcome.committed);
  EXPECT_EQ(outcome.reason, msg::AbortReason::ManifestMismatch);
  EXPECT_EQ(outcome.agentId, "bad");
  EXPECT_THAT(outcome.detail, ::testing::HasSubstr("'" + named + "'"));
  EXPECT_FALSE(outcome.reachedTransfer) << "the round must fail before the transfer phase";
  EXPECT_EQ(trainer.wait(kPatience), 4) << "the trainer reports a version that was not committed";
  EXPECT_EQ(appliedVersion("good"), 0U);
  EXPECT_EQ(appliedVersion("bad"), 0U);
  EXPECT_EQ(block_->committedVersion(), 0U);
}

// The most tensors a manifest may have (kMaxTensors) go through the real programs: the BeginUpdate carrying them is
// read by the coordinator, the workers get the manifest and commit. (Until the verifier's table budget covered the
// tables around the manifest too, this round never began and the trainer waited on it without a word.)
TEST_F(RoundFixture, TheMostTensorsAManifestMayHaveAreCommitted) {
  const std::string model = "synthetic:" + std::to_string(bus::kMaxTensors) + ":64";
  startCoordinator();
  auto worker = startWorker("w0", {"--model", model, "--dump", path("w0.safetensors")});
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--model", model, "--steps", "1", "--dump", path("trainer.safetensors")});
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(outcome.version, 1U);
  ASSERT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 1));
  worker.signal(SIGTERM);
  ASSERT_EQ(worker.wait(kPatience), 0);
  expectSameWeights(path("trainer.safetensors"), path("w0.safetensors"), 1);
}

}  // namespace
}  // namespace wsync::test
