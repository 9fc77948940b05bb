#include "soak_flatness.hpp"

#include <algorithm>

#include "report_format.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double ratioOf(double first, double last) { return first > 0 ? last / first : 0; }

// Throughput and latency: the last window within +-kSoakFlatTolerance of the first. `higherIsBetter` says which
// side of a miss is an improvement (rounds/s) and which a regression (round times).
SoakCheck withinTolerance(std::string figure, double first, double last, bool higherIsBetter) {
  const double lastOverFirst = ratioOf(first, last);
  SoakCheck check{std::move(figure), first, last, lastOverFirst,
                  "within +-" + fixed(kSoakFlatTolerance * 100, 0) + "% (" + ratio(1 - kSoakFlatTolerance) + " to " +
                      ratio(1 + kSoakFlatTolerance) + ")",
                  first > 0 && lastOverFirst >= 1 - kSoakFlatTolerance && lastOverFirst <= 1 + kSoakFlatTolerance};
  check.better = !check.met && first > 0 && (lastOverFirst > 1) == higherIsBetter;
  return check;
}

// A resource: the last window's maximum at most the first window's maximum plus `tolerance`.
SoakCheck noGrowth(std::string figure, const SampledRange& first, const SampledRange& last, double tolerance,
                   double scale, const std::string& toleranceText) {
  const double firstMax = static_cast<double>(first.max) / scale;
  const double lastMax = static_cast<double>(last.max) / scale;
  const double limit = firstMax + tolerance / scale;
  return SoakCheck{std::move(figure), firstMax, lastMax, ratioOf(firstMax, lastMax),
                   "<= first max" + toleranceText + " = " + fixed(limit, scale > 1 ? 2 : 0), lastMax <= limit};
}

SoakCheck memory(std::string figure, const SampledRange& first, const SampledRange& last) {
  const double tolerance = std::max(kSoakRssToleranceShare * static_cast<double>(first.max),
                                    static_cast<double>(kSoakRssToleranceBytes));
  return noGrowth(std::move(figure), first, last, tolerance, kMiB,
                  " + max(" + fixed(kSoakRssToleranceShare * 100, 0) + "%, " +
                      fixed(static_cast<double>(kSoakRssToleranceBytes) / kMiB, 0) + " MiB)");
}

SoakCheck descriptors(std::string figure, const SampledRange& first, const SampledRange& last) {
  return noGrowth(std::move(figure), first, last, static_cast<double>(kSoakFdTolerance), 1,
                  " + " + std::to_string(kSoakFdTolerance));
}

SoakCheck count(std::string figure, const SampledRange& first, const SampledRange& last) {
  return noGrowth(std::move(figure), first, last, 0, 1, "");
}

}  // namespace

std::vector<SoakCheck> flatnessChecks(const SoakResults& r) {
  std::vector<SoakCheck> checks;
  if (r.windows.size() < kSoakMinWindows) return checks;
  const SoakWindow& first = r.windows[1];
  const SoakWindow& last = r.windows.back();
  checks.push_back(withinTolerance("rounds/s", first.roundsPerSecond(), last.roundsPerSecond(), true));
  checks.push_back(
      withinTolerance("round time p50 (ms)", first.roundTime.p50Us / 1000, last.roundTime.p50Us / 1000, false));
  checks.push_back(
      withinTolerance("round time p99 (ms)", first.roundTime.p99Us / 1000, last.roundTime.p99Us / 1000, false));
  checks.push_back(memory("coordinator RSS (MiB)", first.coordinatorRss, last.coordinatorRss));
  checks.push_back(memory("coordinator RssAnon (MiB)", first.coordinatorAnon, last.coordinatorAnon));
  checks.push_back(descriptors("coordinator open fds", first.coordinatorFds, last.coordinatorFds));
  checks.push_back(count("coordinator threads", first.coordinatorThreads, last.coordinatorThreads));
  checks.push_back(memory("trainer (this process) RSS (MiB)", first.trainerRss, last.trainerRss));
  checks.push_back(memory("trainer RssAnon (MiB)", first.trainerAnon, last.trainerAnon));
  checks.push_back(descriptors("trainer open fds", first.trainerFds, last.trainerFds));
  checks.push_back(count("trainer threads", first.trainerThreads, last.trainerThreads));
  checks.push_back(memory("worker-0 (resident) RSS (MiB)", first.residentRss, last.residentRss));
  checks.push_back(memory("worker-0 RssAnon (MiB)", first.residentAnon, last.residentAnon));
  checks.push_back(descriptors("worker-0 open fds", first.residentFds, last.residentFds));
  checks.push_back(count("worker-0 threads", first.residentThreads, last.residentThreads));
  checks.push_back(memory("largest worker RSS (MiB)", first.workersMaxRss, last.workersMaxRss));
  checks.push_back(descriptors("most fds of a worker", first.workersMaxFds, last.workersMaxFds));
  checks.push_back(count("/dev/shm segments of the bus", first.shmSegments, last.shmSegments));
  checks.push_back(count("runtime files of the bus", first.runtimeFiles, last.runtimeFiles));
  checks.push_back(count("child processes", first.children, last.children));
  checks.push_back(count("zombie children", first.zombies, last.zombies));
  return checks;
}

std::vector<SoakCheck> healthChecks(const SoakResults& r) {
  std::vector<SoakCheck> checks;
  const auto zero = [&](std::string figure, std::size_t value) {
    checks.push_back(SoakCheck{std::move(figure), 0, static_cast<double>(value), 0, "0", value == 0});
  };
  zero("aborted rounds not caused by a restart", r.unexpectedAborts);
  zero("refused rounds", r.refused);
  zero("workers that ended by themselves", r.unexpectedExits);
  zero("/dev/shm segments of the bus after the coordinator stopped", r.residueAfterStop.shmSegments);
  checks.push_back(SoakCheck{"wsync-coordinator's exit on SIGTERM", 0, 0, 0, "exited with status 0",
                             r.coordinatorExit == "exited with status 0"});
  return checks;
}

}  // namespace wsync::bench
