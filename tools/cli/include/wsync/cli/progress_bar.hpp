#pragma once
// A progress bar for a long transfer, on the status line under the logs (log.hpp):
//
//   version 13  [###########.........]  1.21 / 2.47 GB  4.83 GB/s
//
// Quiet while a transfer is younger than kProgressBarDelay (rounds of a few hundred milliseconds print nothing but
// their log line) and wherever stderr is not a terminal (logs in files stay clean).
#include <chrono>
#include <cstdint>
#include <string>

namespace wsync::cli {

// Shorter transfers never show a bar: drawing and erasing it would only flicker.
inline constexpr std::chrono::milliseconds kProgressBarDelay{500};
// Redraws at most this often: a terminal needs no more, and a log file behind a pty no less.
inline constexpr std::chrono::milliseconds kProgressBarRedraw{100};

// The bar's text: label, bar of `width` cells, bytes done of total, rate. Pure, for tests.
std::string renderProgressBar(const std::string& label, std::uint64_t bytesDone, std::uint64_t bytesTotal,
                              double bytesPerSecond, int width);

class ProgressBar {
 public:
  using Clock = std::chrono::steady_clock;

  ProgressBar(std::string label, Clock::time_point started) : label_(std::move(label)), started_(started) {}
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar() { finish(); }

  // Draws the bar if the transfer is old enough and the last redraw long enough ago. Returns whether it drew.
  bool update(std::uint64_t bytesDone, std::uint64_t bytesTotal, Clock::time_point now);
  // Erases the bar, if it was ever drawn.
  void finish();

 private:
  std::string label_;
  Clock::time_point started_;
  Clock::time_point lastDrawn_{};
  bool shown_ = false;
};

}  // namespace wsync::cli
