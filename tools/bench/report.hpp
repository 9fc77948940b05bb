#pragma once
// The results of `wsync-bench bus` as a markdown report (for people and bench/results/) and as JSON.
#include <string>

#include "bench_config.hpp"
#include "latency_benchmark.hpp"
#include "machine_info.hpp"
#include "version_read.hpp"

namespace wsync::bench {

struct BusBenchReport {
  MachineInfo machine;
  BusBenchConfig config;
  LatencyResults latency;
  VersionReadResult versionRead;
  double wallSeconds = 0;
};

std::string renderMarkdown(const BusBenchReport& report);
std::string renderJson(const BusBenchReport& report);

}  // namespace wsync::bench
