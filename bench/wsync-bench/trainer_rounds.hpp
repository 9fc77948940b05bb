#pragma once
// What `round` and `soak` share: a trainer in this process, and the agents the control block shows attached.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <wsync/bus/state/control_block.hpp>
#include <wsync/trainer_agent/trainer_agent.hpp>

#include "tensor_memory.hpp"

namespace wsync::bench {

// N workers start, write their tensors (64 MiB at most) and register: seconds for 32 on 2 cores.
inline constexpr std::chrono::milliseconds kWorkerJoinTimeout{60'000};
inline constexpr std::chrono::milliseconds kWorkerJoinPollInterval{5};
// A round takes ms to a few hundred, an aborted one until the coordinator sees the death: a minute is a stuck bus.
inline constexpr std::chrono::milliseconds kRoundOutcomeTimeout{60'000};
// The wait for an outcome is cut into slices this long, so that Ctrl-C or a dead coordinator ends it at once.
inline constexpr std::chrono::milliseconds kOutcomeSlice{100};

std::vector<bus::AgentSlotSnapshot> attachedAgents(const bus::ControlBlockView& view);

class BenchTrainer {
 public:
  BenchTrainer(const std::string& bus, const std::string& id, const std::string& model);

  const bus::Manifest& manifest() const { return manifest_; }
  // Publishes `version` of the weights (with `newContent`, 1/32 of their words changed first, untimed).
  void publish(std::uint64_t version, msg::PauseMode pauseMode, bool newContent = false);
  // The outcome of `version`; `check` runs between slices and throws to name a cause (a dead coordinator).
  trainer_agent::PublishOutcome awaitOutcome(std::uint64_t version, std::chrono::milliseconds timeout,
                                             const std::function<void()>& check = {});
  trainer_agent::TrainerAgent& agent() { return *agent_; }
  // Goodbye, its I/O thread joined: before the workers and the coordinator stop.
  void stop() { agent_.reset(); }

 private:
  const bus::Manifest manifest_;
  TensorMemory weights_;  // read by the agent's I/O thread: agent_, declared after it, goes first
  std::unique_ptr<trainer_agent::TrainerAgent> agent_;
};

}  // namespace wsync::bench
