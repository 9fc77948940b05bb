#pragma once
// `wsync-bench soak`: thousands of update rounds back to back through the real programs, with random worker restarts,
// and whether anything grows over time. A real wsync-coordinator, N real wsync-worker processes (shm channel) and a
// TrainerAgent in this process publishing version after version; every so often one worker (never worker-0, the
// resident that shows a worker's own growth) is SIGKILLed at a random moment and started again under the same id.
// The same-run baseline is the run's own beginning: the first window after the warm-up, which like the last has no
// restarts.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report.hpp"
#include "stats.hpp"

namespace wsync::bench {

// wsync-coordinator creates its control block, arena and sockets in milliseconds; ten seconds is a machine badly
// overloaded or a coordinator that failed (its exit status is reported then).
inline constexpr std::chrono::milliseconds kSoakCoordinatorStartTimeout{10'000};
// Every worker process started and registered: 8 real wsync-worker processes on 2 cores take well under a second.
inline constexpr std::chrono::milliseconds kSoakWorkerJoinTimeout{60'000};
// How often the benchmark looks at the control block while the coordinator and the workers come up.
inline constexpr std::chrono::milliseconds kSoakJoinPollInterval{5};
// A restarted worker registers again within about a hundred milliseconds; thirty seconds without it means that the
// bus refuses it (a product bug the soak exists to find), and the run stops and says so.
inline constexpr std::chrono::milliseconds kSoakRejoinTimeout{30'000};
// One round of a small manifest takes milliseconds, an aborted one as long as the coordinator takes to see the death
// (its liveness check runs every 20 ms). A minute without an outcome is a stuck bus.
inline constexpr std::chrono::milliseconds kSoakRoundOutcomeTimeout{60'000};
// wsync-worker and wsync-coordinator stop on SIGTERM within one step of their loops (100 ms); then SIGKILL.
inline constexpr std::chrono::milliseconds kSoakStopGrace{5'000};
// A restart kills its worker this long after the round's publish, drawn uniformly from [0, factor x the round time
// p50 of the previous window]: about half the kills land inside a round (in every phase), the rest between rounds.
inline constexpr double kSoakKillDelayFactor = 2.0;
// Before any round was timed (the first kill comes after two windows, so this is only a fallback).
inline constexpr std::chrono::microseconds kSoakDefaultKillDelayMax{5'000};
// Resource samples per window (RSS, fds, threads, /dev/shm, children): ten show a trend inside a window too.
inline constexpr std::size_t kSoakSamplesPerWindow = 10;
// --quick: 6 windows of 100 rounds, seconds on 2 cores, restarts 8 times as often as the full run's.
inline constexpr std::size_t kQuickSoakRounds = 600;
inline constexpr std::size_t kQuickSoakWindow = 100;
inline constexpr std::size_t kQuickSoakRestartEvery = 25;
// Windows: the first is a warm-up (connections, page faults, the manifest's first trip), the second and the last run
// without restarts (the baseline, and the same after every restart), the ones between with restarts.
inline constexpr std::size_t kSoakMinWindows = 3;
inline constexpr std::size_t kSoakMinWindowsWithRestarts = 4;
inline constexpr std::size_t kSoakMinWindowRounds = 20;

// Goals (issue: "flat"): rounds/s, p50 and p99 of the last window within +-10% of the first after the warm-up; RSS
// and open fds of the last window no higher than the first window's maximum plus a small tolerance (malloc arenas and
// ZeroMQ's buffers breathe a little); /dev/shm entries and child processes no more than in the first.
inline constexpr double kSoakFlatTolerance = 0.10;
inline constexpr double kSoakRssToleranceShare = 0.05;
inline constexpr std::uint64_t kSoakRssToleranceBytes = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kSoakFdTolerance = 2;
// The report warns that the ratios measure the neighbours too when their share of the CPUs differs by more than this
// between the first and the last window.
inline constexpr double kSoakOthersShiftWarning = 0.10;
// The report lists at most this many unexpected aborts and exits by their detail.
inline constexpr std::size_t kSoakMaxListedDetails = 10;

struct SoakBenchConfig {
  ModeOptions mode;
  std::size_t rounds = 10'000;
  std::size_t workers = 8;
  std::size_t window = 500;        // rounds per window of figures
  std::size_t restartEvery = 200;  // mean rounds between worker restarts; 0: none
  std::uint64_t seed = 20261122;
  std::string model = "synthetic:16:1";  // 1 MiB moved to every worker each round, yet a round of a few ms
  std::string pauseMode = "keep";
  std::int64_t workerStepMs = 5;  // wsync-worker's decode step (its default)
  std::string binDir;             // wsync-coordinator and wsync-worker; empty: beside wsync-bench, else this build
  std::string childLog;           // the programs' stderr; empty: the benchmark's
  std::string childLogLevel = "warn";
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
ProcessUsage readProcessUsage(pid_t pid);

// Processes whose parent is `parent`, and how many of them are zombies (exited, not reaped).
std::pair<std::uint32_t, std::uint32_t> countChildren(pid_t parent);
// The bus's shared-memory segments in /dev/shm (control block "wsync-<uid>-<bus>", arena "...-shm") and its files in
// the runtime folder (sockets "<bus>.req", "<bus>.evt"): they must not accumulate.
std::pair<std::uint32_t, std::uint32_t> countBusResidue(const std::string& busName, const std::string& runtimeDir);

// One sample of what the processes and the bus hold, taken between two rounds.
struct SoakSample {
  std::size_t window = 0;
  std::size_t round = 0;  // rounds finished when it was taken
  double seconds = 0;     // since the first round was published
  ProcessUsage coordinator;
  ProcessUsage trainer;   // this process: the TrainerAgent and the benchmark's bookkeeping (reserved up front)
  ProcessUsage resident;  // worker-0, never restarted
  std::uint64_t workersMaxRss = 0, workersSumRss = 0;  // over the live workers
  std::uint32_t workersMaxFds = 0, liveWorkers = 0;
  std::uint32_t shmSegments = 0, runtimeFiles = 0, children = 0, zombies = 0;
  std::uint32_t activeSlots = 0, deadSlots = 0;  // control block: registered agents; dead ones kept for monitors
};

struct SoakWindow {
  std::size_t firstRound = 0;  // 0-based index of its first round in the run
  std::size_t rounds = 0;
  bool warmup = false;
  bool withRestarts = false;  // restarts were scheduled in it (they may still have drawn none)
  std::size_t committed = 0, abortedByRestart = 0, abortedOther = 0, refused = 0;
  std::size_t restarts = 0, restartsMidRound = 0;
  std::size_t roundsShortOfWorkers = 0;  // published while fewer than N workers were registered
  double seconds = 0;                    // the first publish to the last outcome (restarts and samples included)
  double othersCpuShare = 0;
  Summary roundTime;  // committed rounds, us: BeginUpdate sent -> Commit handled

  double roundsPerSecond() const { return seconds > 0 ? static_cast<double>(rounds) / seconds : 0; }
};

struct SoakRestart {
  std::size_t round = 0;  // 0-based index of the round published just before the kill
  std::string worker;
  bool midRound = false;
  std::string phase;     // the coordinator's round phase (control block) at the kill
  double delayUs = 0;    // after the publish
  double rejoinMs = -1;  // from the new process's start until it held an attached slot; -1: killed again first
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
  std::map<std::string, std::size_t> abortsByReason;  // every aborted round
  std::map<std::string, std::size_t> killPhases;      // restarts by the coordinator's phase at the kill
  std::size_t unexpectedAborts = 0;                   // aborts that name no killed worker
  std::size_t unexpectedExits = 0;                    // workers that ended without being killed (restarted too)
  std::size_t refused = 0;
  std::vector<std::string> details;  // of the first unexpected aborts, exits and refusals
  Summary abortedRoundTime;          // aborted rounds, us: BeginUpdate sent -> Abort handled
  Summary rejoin;                    // restarted worker started -> registered again, us
  // Committed rounds pooled over the windows without restarts (the warm-up left out) and over those with them.
  Summary withoutRestarts, withRestarts;
  // After the run: how the coordinator ended (SIGTERM, then its own clean-up), and what the bus left behind.
  std::string coordinatorExit;
  std::pair<std::uint32_t, std::uint32_t> residueAfterStop;
  double othersCpuShare = 0;
};

// Progress lines go to `progress`; failures throw BenchFailure after every process is stopped.
SoakResults measureSoak(const SoakBenchConfig& config, std::ostream& progress);

void runSoakBenchmark(const SoakBenchConfig& config, Report& report);

}  // namespace wsync::bench
