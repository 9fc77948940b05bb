#pragma once
// A Prometheus-style histogram of durations in seconds: cumulative counts at fixed upper bounds, sum and count.
#include <array>
#include <cstdint>

namespace wsync::mon {

class Histogram {
 public:
  // From 1 ms (a tiny round on one host) to 2 minutes (a GPU model over a slow network, the transfer timeout).
  static constexpr std::array<double, 15> kBounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                  0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 120.0};

  void observe(double seconds) {
    for (std::size_t index = 0; index < kBounds.size(); ++index) {
      if (seconds <= kBounds[index]) ++counts_[index];
    }
    sum_ += seconds;
    ++count_;
  }
  // Observations at most kBounds[index] seconds (cumulative, as Prometheus buckets are).
  std::uint64_t atMost(std::size_t index) const { return counts_[index]; }
  double sum() const { return sum_; }
  std::uint64_t count() const { return count_; }

 private:
  std::array<std::uint64_t, kBounds.size()> counts_{};
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

}  // namespace wsync::mon
