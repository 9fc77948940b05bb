#include "shm_receiver.hpp"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <iostream>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/cli/model_catalog.hpp>
#include <wsync/bus/channel/shm/shm_arena.hpp>

#include "agent_processes.hpp"
#include "bench_failure.hpp"
#include "shm_config.hpp"
#include "tensor_memory.hpp"
#include "thread_cpu_time.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

void report(const char* line) {
  std::fputs(line, stdout);
  std::fflush(stdout);  // a pipe: without the flush the line would wait in stdio's buffer
}

void receiveAll(const ShmReceiverOptions& options) {
  auto arena = bus::ShmArena::open(options.arena);
  if (!arena) throw BenchFailure(arena.error().describe());
  auto specs = cli::modelTensors(options.model);
  if (!specs) throw BenchFailure(specs.error().describe());
  auto manifest = bus::Manifest::create(std::move(*specs));
  if (!manifest) throw BenchFailure(manifest.error().describe());
  auto plan = bus::BucketPlan::build(*manifest, arena->geometry().bucketBytes, kShmPlanAlignment);
  if (!plan) throw BenchFailure(plan.error().describe());
  const TensorMemory staging(*manifest);  // every page written once, before "ready"
  report("ready\n");

  for (std::uint64_t transfer = 1; transfer <= options.transfers; ++transfer) {
    const std::uint64_t cpuStart = threadCpuNanoseconds();
    auto received = arena->receive(transfer, *plan, staging.tensors(), options.receiver,
                                   Clock::now() + kReceiverIdleTimeout);
    const auto finish = Clock::now();
    const std::uint64_t cpuNs = threadCpuNanoseconds() - cpuStart;
    if (!received) throw BenchFailure("transfer " + std::to_string(transfer) + ": " + received.error().describe());
    const auto finishNs = std::chrono::duration_cast<std::chrono::nanoseconds>(finish.time_since_epoch()).count();
    std::printf("done %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %lld %" PRIu64 "\n", transfer, received->bytes,
                received->digest.hi, received->digest.lo, static_cast<long long>(finishNs), cpuNs);
    std::fflush(stdout);
  }
}

}  // namespace

int runShmReceiver(const ShmReceiverOptions& options) {
  dieWithParent(options.parent);
  try {
    receiveAll(options);
    return 0;
  } catch (const std::exception& error) {
    // The benchmark sees the pipe close, names this receiver and points here.
    std::cerr << "wsync-bench receiver " << options.receiver << ": " << error.what() << '\n';
  }
  return 2;
}

}  // namespace wsync::bench
