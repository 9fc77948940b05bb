#include "stats.hpp"

#include <algorithm>
#include <cmath>

namespace wsync::bench {

Summary summarize(std::vector<double> values) {
  Summary summary;
  summary.samples = values.size();
  if (values.empty()) return summary;
  std::sort(values.begin(), values.end());
  const auto rank = [&values](double fraction) {
    const double nearest = std::ceil(fraction * static_cast<double>(values.size()));
    return values[std::min(nearest < 1 ? 0 : static_cast<std::size_t>(nearest) - 1, values.size() - 1)];
  };
  const std::size_t middle = values.size() / 2;
  summary.min = values.front();
  summary.p50 = rank(0.50);
  summary.p90 = rank(0.90);
  summary.p99 = rank(0.99);
  summary.max = values.back();
  summary.median = values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
  return summary;
}

Json toJson(const Summary& summary, const std::string& unit, const std::vector<std::string>& figures) {
  Json json{{"samples", summary.samples}};
  for (const std::string& figure : figures) {
    json[figure + "_" + unit] = figure == "min"   ? summary.min
                                : figure == "p50" ? summary.p50
                                : figure == "p90" ? summary.p90
                                : figure == "p99" ? summary.p99
                                : figure == "max" ? summary.max
                                                  : summary.median;
  }
  return json;
}

Cell spread(const Summary& summary, const std::string& unit, int decimals) {
  return {toJson(summary, unit, {"median", "min", "max"}), fixed(summary.median, decimals) + " (" +
                                                               fixed(summary.min, decimals) + "-" +
                                                               fixed(summary.max, decimals) + ")"};
}

}  // namespace wsync::bench
