#pragma once
// The results of `wsync-bench soak` as a markdown report (for people and bench/results/) and as JSON.
#include <string>

#include "machine_info.hpp"
#include "soak_benchmark.hpp"
#include "soak_config.hpp"

namespace wsync::bench {

struct SoakBenchReport {
  MachineInfo machine;
  SoakBenchConfig config;
  SoakResults results;
  double wallSeconds = 0;
};

std::string renderSoakMarkdown(const SoakBenchReport& report);
std::string renderSoakJson(const SoakBenchReport& report);

}  // namespace wsync::bench
