#pragma once
// `wsync-bench regions`: region rounds over cuda_ipc on one GPU, M source processes into 1 whole receiver or 2
// tensor-parallel halves, beside a device copy of the bytes each receiver receives (regions_benchmark.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// The goal (docs/regions.md): a round within 10% of one device-to-device copy of what each receiver receives.
inline constexpr double kMaxRegionToCopyRatio = 1.10;

struct RegionBenchConfig {
  ModeOptions mode;
  std::vector<std::string> models{"qwen2.5-7b", "qwen3-30b-a3b", "deepseek-v3:8"};
  std::vector<std::uint32_t> sources{1, 2, 4, 8};
  std::vector<std::string> layouts{"whole", "tp2"};  // 1 receiver of whole tensors; 2 of tensor-parallel halves
  std::size_t warmup = 2;
  std::size_t reps = 10;
  int device = 0;
  // How each side's buffers are allocated. one: back to back in a block per process (a flat parameter buffer);
  // tensor: a block each (a caching allocator's segment per large tensor).
  std::string sourceAllocation = "one";
  std::string receiverAllocation = "one";

  void quick() {
    models = {"qwen2.5-7b"};
    sources = {1, 2};
    reps = 3;
  }
};

void runRegionBenchmark(const RegionBenchConfig& config, Report& report);

}  // namespace wsync::bench
