// The receiver processes of `wsync-bench shm` (shm.hpp).
#include <chrono>
#include <exception>
#include <iostream>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/shm/shm_arena.hpp>

#include "bench_failure.hpp"
#include "shm.hpp"
#include "tensor_memory.hpp"
#include "machine_load.hpp"

namespace wsync::bench {

int runShmReceiver(const ShmReceiverOptions& options) {
  try {
    auto arena = orThrow(bus::ShmArena::open(options.arena), "arena");
    const bus::Manifest manifest = catalogManifest(options.model);
    const auto plan =
        orThrow(bus::BucketPlan::build(manifest, arena.geometry().bucketBytes, kShmPlanAlignment), "plan");
    const TensorMemory staging(manifest);  // every page written once, before "ready"
    // stdout is a pipe: every line is flushed (std::endl), or it would wait in the stream's buffer.
    std::cout << "ready" << std::endl;
    for (std::uint64_t transfer = 1; transfer <= options.transfers; ++transfer) {
      const std::uint64_t cpuStart = threadCpuNanoseconds();
      auto received = arena.receive(transfer, plan, staging.tensors(), options.receiver,
                                    std::chrono::steady_clock::now() + kReceiverIdleTimeout);
      const auto finish = std::chrono::steady_clock::now();
      const std::uint64_t cpuNs = threadCpuNanoseconds() - cpuStart;
      const bus::TransferResult result = orThrow(std::move(received), "transfer " + std::to_string(transfer));
      std::cout << "done " << transfer << ' ' << result.bytes << ' ' << result.digest.hi << ' ' << result.digest.lo
                << ' ' << std::chrono::nanoseconds(finish.time_since_epoch()).count() << ' ' << cpuNs << std::endl;
    }
    return 0;
  } catch (const std::exception& error) {
    // The benchmark sees the pipe close, names this receiver and points here.
    std::cerr << "wsync-bench receiver " << options.receiver << ": " << error.what() << '\n';
  }
  return 2;
}

}  // namespace wsync::bench
