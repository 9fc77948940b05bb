// The channel of a round is the trainer's choice and the workers' capability: the coordinator refuses a GPU round,
// naming the worker, when a worker bound host memory (it offers the host channels only), before anyone pauses; a GPU
// round with no worker commits without touching a GPU. Runs the real coordinator and both agents in this process, with
// or without CUDA in the build and with or without a GPU on the machine.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include <wsync/coordinator/coordinator_thread.hpp>
#include "test_environment.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/cli/model_catalog.hpp"
#include "wsync/trainer_agent/trainer_agent.hpp"
#include "wsync/worker_agent/worker_agent.hpp"

namespace wsync::test {
namespace {

using coordinator::CoordinatorThread;

using namespace std::chrono_literals;

// Far above what any step takes here; only a broken agent or coordinator gets near it.
constexpr auto kGenerous = 20s;

struct TinyModel {
  std::vector<bus::TensorSpec> specs = *cli::modelTensors("tiny");
  std::vector<std::vector<std::byte>> buffers;

  TinyModel() {
    const auto manifest = bus::Manifest::create(specs);
    for (std::size_t index = 0; index < specs.size(); ++index) buffers.emplace_back(manifest->tensorBytes(index));
  }
  std::vector<std::span<const std::byte>> views() const {
    return std::vector<std::span<const std::byte>>(buffers.begin(), buffers.end());
  }
};

coordinator::CoordinatorOptions optionsFor(const std::string& bus) {
  coordinator::CoordinatorOptions options;
  options.bus = bus;
  return options;
}

std::unique_ptr<trainer_agent::TrainerAgent> startTrainer(const std::string& bus, msg::ChannelKind channel,
                                                          const TinyModel& model) {
  trainer_agent::TrainerOptions options;
  options.bus = bus;
  options.agentId = "t0";
  options.channel = channel;
  auto trainer = trainer_agent::TrainerAgent::start(options);
  if (!trainer) throw std::runtime_error(trainer.error().describe());
  if (auto declared = (*trainer)->declareManifest(model.specs); !declared) {
    throw std::runtime_error(declared.error().describe());
  }
  return std::move(*trainer);
}

class ChannelChoice : public testing::TestWithParam<msg::ChannelKind> {};

TEST_P(ChannelChoice, AGpuRoundIsRefusedNamingAWorkerBoundToHostMemory) {
  const std::string bus = uniqueBusName("gpuchoice");
  CoordinatorThread coordinator(optionsFor(bus));
  TinyModel engineWeights;
  worker_agent::WorkerOptions workerOptions;
  workerOptions.bus = bus;
  workerOptions.agentId = "host-worker";
  for (std::size_t index = 0; index < engineWeights.specs.size(); ++index) {
    const auto& spec = engineWeights.specs[index];
    ASSERT_TRUE(workerOptions.bindings.bind(spec.name, spec.dtype, spec.shape, engineWeights.buffers[index]));
  }
  std::atomic<int> pauses{0};
  worker_agent::PauseHooks hooks;
  hooks.pause = [&](msg::PauseMode, std::uint64_t) {
    ++pauses;
    return worker_agent::PauseResult{};
  };
  hooks.resume = [](std::uint64_t) {};
  auto worker = worker_agent::WorkerAgent::start(std::move(workerOptions), std::move(hooks));
  ASSERT_TRUE(worker.has_value()) << worker.error().describe();

  TinyModel published;
  auto trainer = startTrainer(bus, GetParam(), published);
  const auto views = published.views();
  ASSERT_TRUE(trainer->publish(1, views).has_value());
  const auto outcome = trainer->waitOutcome(kGenerous);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->kind, trainer_agent::OutcomeKind::Refused);
  EXPECT_NE(outcome->detail.find("worker 'host-worker' cannot use channel " + bus::channelName(GetParam()) +
                                 " (it offers shm, tcp)"),
            std::string::npos)
      << outcome->detail;
  EXPECT_EQ(pauses.load(), 0) << "a refused round must not pause anyone";
  EXPECT_EQ((*worker)->appliedVersion(), 0U);
  trainer->stop();
  (*worker)->stop();
}

TEST_P(ChannelChoice, AGpuRoundWithoutWorkersCommitsWithoutAGpu) {
  const std::string bus = uniqueBusName("gpualone");
  CoordinatorThread coordinator(optionsFor(bus));
  TinyModel published;
  auto trainer = startTrainer(bus, GetParam(), published);
  const auto views = published.views();  // never read: nobody receives
  ASSERT_TRUE(trainer->publish(1, views).has_value());
  const auto outcome = trainer->waitOutcome(kGenerous);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->committed()) << outcome->detail;
  EXPECT_EQ(trainer->committedVersion(), 1U);
  trainer->stop();
}

INSTANTIATE_TEST_SUITE_P(GpuChannels, ChannelChoice, testing::Values(msg::ChannelKind::Nccl, msg::ChannelKind::CudaIpc),
                         [](const testing::TestParamInfo<msg::ChannelKind>& param) {
                           return std::string(msg::EnumNameChannelKind(param.param));
                         });

}  // namespace
}  // namespace wsync::test
