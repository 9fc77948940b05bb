#include "latency_stats.hpp"

#include <algorithm>
#include <cmath>

namespace wsync::bench {
namespace {

double toMicroseconds(std::uint64_t nanoseconds) { return static_cast<double>(nanoseconds) / 1000.0; }

// Nearest-rank percentile of sorted, non-empty samples.
std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double fraction) {
  const double rank = std::ceil(fraction * static_cast<double>(sorted.size()));
  const std::size_t index = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

}  // namespace

LatencySummary summarize(std::vector<std::uint64_t> nanoseconds) {
  LatencySummary summary;
  summary.samples = nanoseconds.size();
  if (nanoseconds.empty()) return summary;
  std::sort(nanoseconds.begin(), nanoseconds.end());
  summary.minUs = toMicroseconds(nanoseconds.front());
  summary.p50Us = toMicroseconds(percentile(nanoseconds, 0.50));
  summary.p90Us = toMicroseconds(percentile(nanoseconds, 0.90));
  summary.p99Us = toMicroseconds(percentile(nanoseconds, 0.99));
  summary.maxUs = toMicroseconds(nanoseconds.back());
  return summary;
}

}  // namespace wsync::bench
