#include "trainer_rounds.hpp"

#include "bench_failure.hpp"

namespace wsync::bench {
std::vector<bus::AgentSlotSnapshot> attachedAgents(const bus::ControlBlockView& view) {
  std::vector<bus::AgentSlotSnapshot> agents;
  for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
    auto snapshot = view.agentSlot(slot);
    if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active && snapshot->agentAttached) {
      agents.push_back(std::move(*snapshot));
    }
  }
  return agents;
}

BenchTrainer::BenchTrainer(const std::string& bus, const std::string& id, const std::string& model)
    : manifest_(catalogManifest(model)), weights_(manifest_) {
  weights_.fill(kContentSeed);
  agent_ = orThrow(trainer_agent::TrainerAgent::start({.bus = bus, .agentId = id}), "trainer agent");
  orThrow(agent_->declareManifest(manifest_.tensors()), "trainer agent");
}

void BenchTrainer::publish(std::uint64_t version, msg::PauseMode pauseMode, bool newContent) {
  if (newContent) weights_.moveToVersion(kContentSeed, version);
  orThrow(agent_->publish(version, weights_.constTensors(), {.label = {}, .pauseMode = pauseMode}),
          "publish version " + std::to_string(version));
}

trainer_agent::PublishOutcome BenchTrainer::awaitOutcome(std::uint64_t version, std::chrono::milliseconds timeout,
                                                         const std::function<void()>& check) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    throwIfInterrupted();
    if (auto outcome = agent_->waitOutcome(kOutcomeSlice)) {
      if (outcome->version == version) return *outcome;
      throw BenchFailure("outcome of version " + std::to_string(outcome->version) + " while " +
                         std::to_string(version) + " was in flight");
    }
    if (check) check();
    if (std::chrono::steady_clock::now() > deadline) {
      throw BenchFailure("version " + std::to_string(version) + ": no outcome within " +
                         std::to_string(timeout.count()) + " ms");
    }
  }
}

}  // namespace wsync::bench
