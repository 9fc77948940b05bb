#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace wsync::bench {

// Percentiles of one path's latency samples, in microseconds (nearest rank).
struct LatencySummary {
  std::size_t samples = 0;
  double minUs = 0;
  double p50Us = 0;
  double p90Us = 0;
  double p99Us = 0;
  double maxUs = 0;
};

LatencySummary summarize(std::vector<std::uint64_t> nanoseconds);

// A bus measurement beside its raw ZeroMQ baseline from the same run.
struct LatencyComparison {
  LatencySummary bus;
  LatencySummary raw;
  double p50Ratio() const { return raw.p50Us > 0 ? bus.p50Us / raw.p50Us : 0; }
};

}  // namespace wsync::bench
