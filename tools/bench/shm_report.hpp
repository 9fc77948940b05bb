#pragma once
// The results of `wsync-bench shm` as a markdown report (for people and bench/results/) and as JSON.
#include <string>

#include "machine_info.hpp"
#include "shm_benchmark.hpp"
#include "shm_config.hpp"

namespace wsync::bench {

struct ShmBenchReport {
  MachineInfo machine;
  ShmBenchConfig config;
  ShmResults results;
  double wallSeconds = 0;
};

std::string renderShmMarkdown(const ShmBenchReport& report);
std::string renderShmJson(const ShmBenchReport& report);

}  // namespace wsync::bench
