// The worker processes of `wsync-bench round` (round.hpp).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <exception>
#include <iostream>

#include <wsync/worker_agent/worker_agent.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "round.hpp"
#include "tensor_memory.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

void serve(const RoundWorkerOptions& options) {
  // SIGTERM, blocked in every thread (the agent's threads inherit the mask), is taken by sigtimedwait alone: no
  // handler runs inside the agent's code, and no blocking call of the agent fails with EINTR.
  sigset_t termination;
  sigemptyset(&termination);
  sigaddset(&termination, SIGTERM);
  if (::pthread_sigmask(SIG_BLOCK, &termination, nullptr) != 0) throw BenchFailure("cannot block SIGTERM");
  const bus::Manifest manifest = catalogManifest(options.model);
  TensorMemory weights(manifest);  // the engine's weights: every page written once, before registration
  worker_agent::WorkerOptions workerOptions{.bus = options.bus, .agentId = options.id};
  for (std::size_t index = 0; index < manifest.size(); ++index) {
    const bus::TensorSpec& spec = manifest.tensors()[index];
    orThrow(workerOptions.bindings.bind(spec.name, spec.dtype, spec.shape, weights.tensors()[index]), "bind");
  }
  // An idle engine: nothing to quiesce, so the pause returns at once. The time of the last pause tells a stuck
  // benchmark from one that is merely between measurements.
  std::atomic<Clock::rep> lastPause{Clock::now().time_since_epoch().count()};
  worker_agent::PauseHooks hooks{.pause = [&lastPause](msg::PauseMode, std::uint64_t) {
                                   lastPause.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
                                 },
                                 .resume = [](std::uint64_t) {}};
  auto agent = orThrow(worker_agent::WorkerAgent::start(std::move(workerOptions), std::move(hooks)), "worker agent");
  const timespec slice{std::chrono::seconds(kRoundWorkerSignalSlice).count(), 0};
  while (::sigtimedwait(&termination, nullptr, &slice) != SIGTERM) {
    if (Clock::now() - Clock::time_point{Clock::duration{lastPause.load(std::memory_order_relaxed)}} >
        kAgentIdleTimeout) {
      agent->stop();
      throw BenchFailure("no round for " + std::to_string(kAgentIdleTimeout.count()) +
                         " ms: the benchmark is gone or stuck");
    }
  }
  agent->stop();  // Goodbye: the coordinator frees the slot at once
}

}  // namespace

int runRoundWorker(const RoundWorkerOptions& options) {
  try {
    serve(options);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "wsync-bench round worker " << options.id << ": " << error.what() << '\n';
  }
  return 2;
}

}  // namespace wsync::bench
