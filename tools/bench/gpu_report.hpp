#pragma once
// The results of `wsync-bench gpu` as a markdown report (for people and bench/results/) and as JSON.
#include <string>

#include "gpu_benchmark.hpp"
#include "gpu_config.hpp"
#include "gpu_info.hpp"
#include "machine_info.hpp"

namespace wsync::bench {

struct GpuBenchReport {
  MachineInfo machine;
  GpuInfo gpus;
  GpuBenchConfig config;
  GpuResults results;
  double wallSeconds = 0;
};

std::string renderGpuMarkdown(const GpuBenchReport& report);
std::string renderGpuJson(const GpuBenchReport& report);

}  // namespace wsync::bench
