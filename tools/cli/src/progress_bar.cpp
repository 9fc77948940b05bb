#include "wsync/cli/progress_bar.hpp"

#include <algorithm>
#include <cstdio>

#include "wsync/bus/core/log.hpp"

namespace wsync::cli {

namespace {

constexpr int kBarCells = 24;

// Two significant decimals in the unit that keeps the number below 1000.
std::string amount(double value, const char* const* units) {
  int unit = 0;
  while (value >= 1000.0 && units[unit + 1] != nullptr) {
    value /= 1000.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

constexpr const char* kByteUnits[] = {"B", "kB", "MB", "GB", "TB", nullptr};
constexpr const char* kRateUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s", nullptr};

}  // namespace

std::string renderProgressBar(const std::string& label, std::uint64_t bytesDone, std::uint64_t bytesTotal,
                              double bytesPerSecond, int width) {
  const double fraction =
      bytesTotal == 0 ? 1.0 : std::min(1.0, static_cast<double>(bytesDone) / static_cast<double>(bytesTotal));
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  char percent[16];
  std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(fraction * 100.0));
  return label + "  [" + bar + "] " + percent + "  " + amount(static_cast<double>(bytesDone), kByteUnits) + " / " +
         amount(static_cast<double>(bytesTotal), kByteUnits) + "  " + amount(bytesPerSecond, kRateUnits);
}

bool ProgressBar::update(std::uint64_t bytesDone, std::uint64_t bytesTotal, Clock::time_point now) {
  if (now - started_ < kProgressBarDelay) return false;
  if (shown_ && now - lastDrawn_ < kProgressBarRedraw) return false;
  const double seconds = std::chrono::duration<double>(now - started_).count();
  const double rate = seconds > 0 ? static_cast<double>(bytesDone) / seconds : 0.0;
  if (!log::showStatusLine(renderProgressBar(label_, bytesDone, bytesTotal, rate, kBarCells))) return false;
  shown_ = true;
  lastDrawn_ = now;
  return true;
}

void ProgressBar::finish() {
  if (!shown_) return;
  log::clearStatusLine();
  shown_ = false;
}

}  // namespace wsync::cli
