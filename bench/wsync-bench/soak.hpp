#pragma once
// `wsync-bench soak`: thousands of rounds through the real programs with random worker restarts (worker-0 never):
// does anything grow? The baseline is the run's own first window after the warm-up (method: README.md).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// wsync-coordinator is up in milliseconds: ten seconds is an overloaded machine or a failed start.
inline constexpr std::chrono::milliseconds kSoakCoordinatorStartTimeout{10'000};
// A restarted worker registers again within ~100 ms: thirty seconds means the bus refuses it (a product bug).
inline constexpr std::chrono::milliseconds kSoakRejoinTimeout{30'000};
// Kill delay after the publish: uniform in [0, 2 x last round p50], so about half the kills land inside a round.
inline constexpr double kSoakKillDelayFactor = 2.0;
inline constexpr std::chrono::microseconds kSoakDefaultKillDelayMax{5'000};  // before any round was timed
// Ten resource samples per window show a trend inside a window too.
inline constexpr std::size_t kSoakSamplesPerWindow = 10;
// Windows: warm-up, baseline without restarts, those with restarts, a last one without.
inline constexpr std::size_t kSoakMinWindows = 3;
inline constexpr std::size_t kSoakMinWindowsWithRestarts = 4;
inline constexpr std::size_t kSoakMinWindowRounds = 20;
// Goals (issue: "flat"): rates +-10%; RSS and fds a little slack (malloc arenas and ZeroMQ's buffers breathe).
inline constexpr double kSoakFlatTolerance = 0.10;
inline constexpr double kSoakRssToleranceShare = 0.05;
inline constexpr double kSoakRssToleranceMiB = 1.0;
inline constexpr double kSoakFdTolerance = 2;
// A warning when the neighbours' CPU share differs by more between the two windows.
inline constexpr double kSoakOthersShiftWarning = 0.10;
inline constexpr std::size_t kSoakMaxListedDetails = 10;  // unexpected aborts and exits listed by their detail

struct SoakBenchConfig {
  ModeOptions mode;
  std::size_t rounds = 10'000;
  std::size_t workers = 8;
  std::size_t window = 500;        // rounds
  std::size_t restartEvery = 200;  // mean rounds between worker restarts; 0: none
  std::uint64_t seed = 20261122;
  std::string model = "synthetic:16:1";  // 1 MiB to every worker each round, yet rounds of a few ms
  std::string pauseMode = "keep";
  std::int64_t workerStepMs = 5;  // wsync-worker's default
  std::string binDir;
  std::string childLogLevel = "warn";
  void quick() {
    rounds = 600;
    window = 100;
    restartEvery = 25;
  }
};

// What a process holds, from /proc/PID/status and /proc/PID/fd.
struct ProcessUsage {
  bool alive = false;            // false: gone or a zombie (the figures are 0)
  std::uint64_t rssBytes = 0;    // VmRSS: resident anonymous, file and shared memory
  std::uint64_t anonBytes = 0;   // RssAnon: the heap and stacks, where a leak shows first
  std::uint64_t shmemBytes = 0;  // RssShmem: pages of shared segments (arena, control block) it has touched
  std::uint32_t fds = 0;         // for this process, one more: the listing's own
  std::uint32_t threads = 0;
};

// What the processes and the bus hold, sampled between two rounds.
struct SoakSample {
  std::size_t window = 0;
  std::size_t round = 0;                               // rounds finished
  double seconds = 0;                                  // since the first publish
  ProcessUsage coordinator{}, trainer{}, resident{};   // trainer: this process; resident: worker-0, never restarted
  std::uint64_t workersMaxRss = 0, workersSumRss = 0;  // over the live workers
  std::uint32_t workersMaxFds = 0, liveWorkers = 0;
  std::uint32_t shmSegments = 0, runtimeFiles = 0, children = 0, zombies = 0;
  std::uint32_t activeSlots = 0, deadSlots = 0;  // control block: registered agents; dead ones kept for monitors
};

struct SoakWindow {
  bool warmup = false;
  bool withRestarts = false;  // restarts were scheduled in it (they may still have drawn none)
  std::size_t rounds = 0, abortedByRestart = 0, abortedOther = 0;
  std::size_t restarts = 0, restartsMidRound = 0;
  std::size_t roundsShortOfWorkers = 0;  // published while fewer than N workers were registered
  double seconds = 0;                    // first publish to last outcome, restarts and samples included
  double othersCpuShare = 0;
  Summary roundTime;  // committed rounds, us: BeginUpdate sent -> Commit handled

  double roundsPerSecond() const { return seconds > 0 ? static_cast<double>(rounds) / seconds : 0; }
};

struct SoakRestart {
  std::size_t round = 0;  // 0-based index of the round published just before the kill
  std::string worker;
  bool midRound = false;  // the round's outcome was not in yet
  std::string phase;      // the coordinator's round phase (control block) at the kill
  double delayUs = 0;     // after the publish
  double rejoinMs = -1;   // until the new process held an attached slot; -1: killed again first
};

struct SoakResults {
  std::string busName, coordinatorPath, workerPath;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  std::size_t sampleEvery = 0;  // rounds between samples
  double startupMs = 0;         // coordinator started until every worker and the trainer were registered
  double firstRoundMs = 0;      // carries the manifest to every worker
  std::vector<SoakWindow> windows;
  std::vector<SoakSample> samples;
  std::vector<SoakRestart> restarts;
  std::map<std::string, std::size_t> abortsByReason, killPhases;
  std::size_t unexpectedAborts = 0;  // aborts that name no killed worker
  std::size_t unexpectedExits = 0;   // workers that ended without being killed (started again too)
  std::size_t refused = 0;
  std::vector<std::string> details;  // of the first unexpected aborts, exits and refusals
  Summary abortedRoundTime;          // us: BeginUpdate sent -> Abort handled
  Summary rejoin;                    // us: a (re)started worker's process started -> it held an attached slot
  // Committed rounds pooled over the windows without restarts (the warm-up left out) and over those with them.
  Summary withoutRestarts, withRestarts;
  std::string coordinatorExit;                               // on SIGTERM, after the run
  std::pair<std::uint32_t, std::uint32_t> residueAfterStop;  // /dev/shm entries and runtime files
  double othersCpuShare = 0;
};

// Progress lines go to `progress`; failures throw BenchFailure after every process is stopped.
SoakResults measureSoak(const SoakBenchConfig& config, std::ostream& progress);

void runSoakBenchmark(const SoakBenchConfig& config, Report& report);

}  // namespace wsync::bench
