#pragma once
// The results of `wsync-bench round` as a markdown report (for people and bench/results/) and as JSON.
#include <string>

#include "machine_info.hpp"
#include "round_benchmark.hpp"
#include "round_config.hpp"

namespace wsync::bench {

struct RoundBenchReport {
  MachineInfo machine;
  RoundBenchConfig config;
  RoundResults results;
  double wallSeconds = 0;
};

std::string renderRoundMarkdown(const RoundBenchReport& report);
std::string renderRoundJson(const RoundBenchReport& report);

}  // namespace wsync::bench
