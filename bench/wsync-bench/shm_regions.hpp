#pragma once
// `wsync-bench shm-regions`: region rounds over shm (docs/regions.md), M sources holding FSDP2 dim-0 shards into 1
// whole receiver or 2 tensor-parallel halves, each side a thread with its own channel over a real ShmChannelOwner's
// arena and rings, beside the same receivers' memcpy of the bytes each receives (shm_regions_benchmark.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// The goal (docs/regions.md): a round moves each receiver's bytes at no less than 0.8 of memcpy's speed.
inline constexpr double kMinShmRegionToMemcpyRatio = 0.8;

struct ShmRegionBenchConfig {
  ModeOptions mode;
  std::vector<std::string> models{"opt-125m", "synthetic:2000:1024"};
  std::vector<std::uint32_t> sources{2, 4};
  std::vector<std::string> layouts{"whole", "tp2"};  // 1 receiver of whole tensors; 2 of tensor-parallel halves
  std::uint64_t bucketMiB = 4;                       // the coordinator's default shm bucket
  std::uint32_t buffers = 2;
  std::size_t warmup = 2;
  std::size_t reps = 9;

  void quick() {
    models = {"opt-125m"};
    sources = {2};
    reps = 3;
  }
};

void runShmRegionBenchmark(const ShmRegionBenchConfig& config, Report& report);

}  // namespace wsync::bench
