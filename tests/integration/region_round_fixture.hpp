#pragma once
// Region rounds with the real programs (docs/regions.md), shared by sharded_round_test.cpp and
// region_faults_test.cpp: trainer ranks that each publish their rows of every tensor (wsync-trainer --shard) on one
// host channel, to a tensor-parallel engine of two workers, each binding its columns (wsync-worker --slice), beside a
// worker that takes the whole model. Every worker dumps its weights at exit, so that a test can check that each one
// holds exactly its part of the trainer's last committed version.
#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "round_fixture.hpp"
#include "weight_dumps.hpp"

namespace wsync::test {

class RegionRoundFixture : public RoundFixture {
 protected:
  // The engine's workers, in the order startWorkers() starts them.
  static constexpr const char* kWorkerIds[] = {"tp0", "tp1", "whole"};

  // A trainer rank on `channel_`: the trainer's --channel picks the round's channel, and the workers offer both.
  ChildProcess startRank(const std::string& id, std::vector<std::string> args, const std::string& stderrPath = {}) {
    args.insert(args.end(), {"--channel", channel_});
    return startTrainer(id, args, stderrPath);
  }
  // The TP engine's two workers and a whole one, registered; `slicedExtra` goes to tp0 and `extra` to all three.
  void startWorkers(const std::vector<std::string>& slicedExtra = {}, const std::vector<std::string>& extra = {}) {
    auto with = [&](std::vector<std::string> args, const std::vector<std::string>& more) {
      args.insert(args.end(), more.begin(), more.end());
      args.insert(args.end(), extra.begin(), extra.end());
      return args;
    };
    workers_.push_back(startWorker("tp0", with({"--slice", "0/2", "--dump", path("tp0.safetensors")}, slicedExtra)));
    workers_.push_back(startWorker("tp1", with({"--slice", "1/2", "--dump", path("tp1.safetensors")}, {})));
    workers_.push_back(startWorker("whole", with({"--dump", path("whole.safetensors")}, {})));
    waitForAgents(3);
  }
  // Each worker ends on SIGTERM, dumping what it serves.
  void stopWorkers() {
    for (ChildProcess& worker : workers_) worker.signal(SIGTERM);
    for (ChildProcess& worker : workers_) ASSERT_EQ(worker.wait(kPatience), 0);
  }
  // Every worker of startWorkers() serves `version`, as the control block says.
  void expectEveryWorkerOn(std::uint64_t version) {
    for (const char* worker : kWorkerIds) EXPECT_EQ(appliedVersion(worker), version) << worker;
  }
  // What every worker dumped is its part of what the trainer dumped, at `version`.
  void expectEveryWorkersPart(std::uint64_t version) {
    expectSlicedWeights(path("trainer.safetensors"), path("tp0.safetensors"), version, cli::Part{0, 2});
    expectSlicedWeights(path("trainer.safetensors"), path("tp1.safetensors"), version, cli::Part{1, 2});
    expectSameWeights(path("trainer.safetensors"), path("whole.safetensors"), version);
  }

  std::string channel_ = "shm";
  std::vector<ChildProcess> workers_;
};

}  // namespace wsync::test
