#pragma once
// What every mode reports of a measurement's samples: nearest-rank percentiles, and the median (the mean of the middle
// two for an even count), in the unit of the samples.
#include <cstddef>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

struct Summary {
  std::size_t samples = 0;
  double min = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
  double median = 0;
};

Summary summarize(std::vector<double> values);

// {"samples": N, "p50_us": ...}: the figures named in `figures`, each key suffixed with `unit`.
Json toJson(const Summary& summary, const std::string& unit,
            const std::vector<std::string>& figures = {"min", "p50", "p90", "p99", "max"});

// "1.23 (1.10-1.40)": the median and the range, with the three in the JSON.
Cell spread(const Summary& summary, const std::string& unit, int decimals);

}  // namespace wsync::bench
