#pragma once
// Parameters of one `wsync-bench soak` run, the limits every wait in it is bounded by, and its goals.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "report.hpp"

namespace wsync::bench {

// wsync-coordinator creates its control block, arena and sockets in milliseconds; ten seconds is a machine that
// is badly overloaded or a coordinator that failed (its exit status is reported then).
inline constexpr std::chrono::milliseconds kSoakCoordinatorStartTimeout{10'000};
// Every worker process started and registered: 8 real wsync-worker processes on 2 cores take well under a second.
inline constexpr std::chrono::milliseconds kSoakWorkerJoinTimeout{60'000};
// How often the benchmark looks at the control block while the coordinator and the workers come up.
inline constexpr std::chrono::milliseconds kSoakJoinPollInterval{5};
// A restarted worker registers again within about a hundred milliseconds; thirty seconds without it means that
// the bus refuses it (a product bug the soak exists to find), and the run stops and says so.
inline constexpr std::chrono::milliseconds kSoakRejoinTimeout{30'000};
// One round of a small manifest takes milliseconds, an aborted one as long as the coordinator takes to see the
// death (its liveness check runs every 20 ms). A minute without an outcome is a stuck bus.
inline constexpr std::chrono::milliseconds kSoakRoundOutcomeTimeout{60'000};
// The wait for an outcome is cut into slices this long, so that Ctrl-C ends a stuck round at once.
inline constexpr std::chrono::milliseconds kSoakOutcomeSlice{100};
// wsync-worker and wsync-coordinator stop on SIGTERM within one step of their loops (100 ms); then SIGKILL.
inline constexpr std::chrono::milliseconds kSoakStopGrace{5'000};
// A restart kills its worker this long after the round's publish, drawn uniformly from [0, factor x the round
// time p50 seen so far): about half the kills land inside a round (in every phase), the rest between rounds.
inline constexpr double kSoakKillDelayFactor = 2.0;
// Before any round was timed (the first kill comes after two windows, so this is only a fallback).
inline constexpr std::chrono::microseconds kSoakDefaultKillDelayMax{5'000};

// Defaults (issue): 10,000 rounds, 8 workers, a restart every 200 rounds on average, figures every 500 rounds.
inline constexpr std::size_t kDefaultSoakRounds = 10'000;
inline constexpr std::size_t kDefaultSoakWorkers = 8;
inline constexpr std::size_t kDefaultSoakWindow = 500;
inline constexpr std::size_t kDefaultSoakRestartEvery = 200;
inline constexpr std::uint64_t kDefaultSoakSeed = 20261122;
// 16 tensors, 1 MiB: every round moves real bytes through the arena to every worker, yet stays a few ms long.
inline constexpr const char* kDefaultSoakModel = "synthetic:16:1";
// Resource samples per window (RSS, fds, threads, /dev/shm, children): ten show a trend inside a window too.
inline constexpr std::size_t kSoakSamplesPerWindow = 10;
// --quick: 6 windows of 100 rounds (warm-up, restart-free, 3 with restarts, restart-free), seconds on 2 cores, with
// restarts 8 times as often as the full run so that a dozen happen.
inline constexpr std::size_t kQuickSoakRounds = 600;
inline constexpr std::size_t kQuickSoakWindow = 100;
inline constexpr std::size_t kQuickSoakRestartEvery = 25;

// Windows: the first is a warm-up (connections, page faults, the manifest's first trip), the second and the last
// run without restarts (the baseline, and the same after every restart), the ones between with restarts.
inline constexpr std::size_t kSoakMinWindows = 3;
inline constexpr std::size_t kSoakMinWindowsWithRestarts = 4;
inline constexpr std::size_t kSoakMinWindowRounds = 20;

// Goals (issue: "flat"): rounds/s, p50 and p99 of the last window within +-10% of the first after the warm-up;
// RSS and open fds of the last window no higher than the first window's maximum plus a small tolerance (malloc
// arenas and ZeroMQ's buffers breathe a little); /dev/shm entries and child processes no more than in the first.
inline constexpr double kSoakFlatTolerance = 0.10;
inline constexpr double kSoakRssToleranceShare = 0.05;
inline constexpr std::uint64_t kSoakRssToleranceBytes = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kSoakFdTolerance = 2;
// The report warns that the ratios measure the neighbours too when their share of the CPUs differs by more than
// this between the first and the last window (a shared machine: someone compiled during one of them).
inline constexpr double kSoakOthersShiftWarning = 0.10;
// The report lists at most this many unexpected aborts and exits by their detail.
inline constexpr std::size_t kSoakMaxListedDetails = 10;

struct SoakBenchConfig {
  ModeOptions mode;
  std::size_t rounds = kDefaultSoakRounds;
  std::size_t workers = kDefaultSoakWorkers;
  std::size_t window = kDefaultSoakWindow;  // rounds per window of figures
  std::size_t restartEvery = kDefaultSoakRestartEvery;  // mean rounds between worker restarts; 0: none
  std::uint64_t seed = kDefaultSoakSeed;
  std::string model = kDefaultSoakModel;
  std::string pauseMode = "keep";
  std::int64_t workerStepMs = 5;  // wsync-worker's decode step (its default)
  std::string binDir;             // wsync-coordinator and wsync-worker; empty: beside wsync-bench, else this build
  std::string childLog;           // the programs' stderr; empty: the benchmark's
  std::string childLogLevel = "warn";
};

// The mode: measures, then fills the report.
void runSoakBenchmark(const SoakBenchConfig& config, Report& report);

}  // namespace wsync::bench
