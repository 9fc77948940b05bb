#pragma once
// `wsync-bench soak`: thousands of update rounds back to back through the real programs, with random worker restarts,
// and whether anything grows over time. A real wsync-coordinator on a bus of its own, N real wsync-worker processes
// (shm channel) and a TrainerAgent in this process publishing version after version; every so often one worker
// (never worker-0, the resident that shows a worker's own growth) is SIGKILLed at a random moment and started again
// under the same agent id. Every window of rounds gives rounds/s, round-time percentiles, aborts, and samples of RSS,
// open fds and threads of the coordinator, the trainer and the workers, the bus's /dev/shm segments and runtime
// files, and the child processes. The same-run baseline is the run's own beginning: the first window after the
// warm-up, which like the last has no restarts. Its parameters, goals, limits and results.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "report.hpp"
#include "stats.hpp"

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

// What a process holds, read from /proc: resident memory, open descriptors, threads and CPU time, read for the
// coordinator, the trainer (this process) and every worker, over and over, to show that none of them grows.
struct ProcessUsage {
  bool alive = false;              // false: /proc/PID is gone (the figures are 0)
  std::uint64_t rssBytes = 0;      // VmRSS of /proc/PID/status: resident anonymous, file and shared memory
  std::uint64_t anonBytes = 0;     // RssAnon: the heap and stacks, where a leak would show
  std::uint64_t shmemBytes = 0;    // RssShmem: pages of shared segments (arena, control block) it has touched
  std::uint32_t fds = 0;           // entries of /proc/PID/fd (for this process: one more, the listing's own)
  std::uint32_t threads = 0;       // Threads of /proc/PID/status
  std::uint64_t cpuTicks = 0;      // utime + stime of /proc/PID/stat, every thread, in clock ticks
  std::uint64_t childCpuTicks = 0; // cutime + cstime: its children that it has reaped
};

ProcessUsage readProcessUsage(pid_t pid);

// The processes whose parent is `parent` (a scan of /proc), and how many of them are zombies: exited but not
// reaped, which a soak with restarts must never accumulate.
struct ChildProcesses {
  std::uint32_t count = 0;  // zombies included
  std::uint32_t zombies = 0;
};

ChildProcesses countChildren(pid_t parent);

// What a bus has in the file system: its shared-memory segments in /dev/shm (control block "wsync-<uid>-<bus>", arena
// "...-shm", and anything else named after the bus) and its files in the runtime folder (sockets "<bus>.req" and
// "<bus>.evt"). They must not accumulate.
struct BusResidue {
  std::uint32_t shmSegments = 0;   // /dev/shm entries of the bus
  std::uint32_t runtimeFiles = 0;  // runtime-folder entries of the bus
};

// `runtimeDir` as bus::runtimeDirectory() gives it.
BusResidue countBusResidue(const std::string& busName, const std::string& runtimeDir);

// The lowest, highest and last of a figure sampled during a window.
struct SampledRange {
  std::uint64_t min = 0;
  std::uint64_t max = 0;
  std::uint64_t last = 0;
  std::size_t samples = 0;

  void add(std::uint64_t value) {
    min = samples == 0 || value < min ? value : min;
    max = samples == 0 || value > max ? value : max;
    last = value;
    ++samples;
  }
};

// One process's figures over a window.
struct UsageRanges {
  SampledRange rss;   // VmRSS
  SampledRange anon;  // RssAnon: heap and stacks, where a leak shows first
  SampledRange fds;
  SampledRange threads;

  void add(const ProcessUsage& usage) {
    rss.add(usage.rssBytes);
    anon.add(usage.anonBytes);
    fds.add(usage.fds);
    threads.add(usage.threads);
  }
};

// One sample of what the processes and the bus hold, taken between two rounds.
struct SoakSample {
  std::size_t round = 0;  // rounds finished when it was taken
  double seconds = 0;     // since the first round was published
  ProcessUsage coordinator;
  ProcessUsage trainer;   // this process: the TrainerAgent and the benchmark's own bookkeeping (reserved up front)
  ProcessUsage resident;  // worker-0, never restarted
  std::uint64_t workersMaxRss = 0;  // over the live workers
  std::uint64_t workersSumRss = 0;
  std::uint32_t workersMaxFds = 0;
  std::uint32_t liveWorkers = 0;
  BusResidue residue;
  ChildProcesses children;
  std::uint32_t activeSlots = 0;  // control block: agents registered (trainer included)
  std::uint32_t deadSlots = 0;    // slots of dead agents, kept visible to monitors until a newcomer needs one
};

struct SoakWindow {
  std::size_t index = 0;
  std::size_t firstRound = 0;  // 0-based index of its first round in the run
  std::size_t rounds = 0;
  bool warmup = false;
  bool withRestarts = false;  // restarts were scheduled in it (they may still have drawn none)
  std::size_t committed = 0;
  std::size_t abortedByRestart = 0;  // the abort names a worker this run killed
  std::size_t abortedOther = 0;
  std::size_t refused = 0;
  std::size_t restarts = 0;
  std::size_t restartsMidRound = 0;      // the round's outcome was not in yet when the worker died
  std::size_t roundsShortOfWorkers = 0;  // published while fewer than N workers were registered
  double seconds = 0;                    // the first publish to the last outcome (restarts and samples included)
  double othersCpuShare = 0;             // CPU time of processes not of this run, as a share of all cores
  Summary roundTime;                     // committed rounds, us: BeginUpdate sent -> Commit handled
  UsageRanges coordinator, trainer, resident;
  SampledRange workersMaxRss, workersMaxFds, shmSegments, runtimeFiles, children, zombies, deadSlots;

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
  std::string busName;
  std::string coordinatorPath;
  std::string workerPath;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  std::size_t sampleEvery = 0;  // rounds between samples
  double startupMs = 0;         // coordinator started until every worker and the trainer were registered
  double firstRoundMs = 0;      // carries the manifest to every worker
  std::vector<SoakWindow> windows;
  std::vector<SoakSample> samples;
  std::vector<SoakRestart> restarts;
  std::map<std::string, std::size_t> abortsByReason;  // every aborted round, by AbortReason
  std::map<std::string, std::size_t> killPhases;      // restarts by the coordinator's phase at the kill
  std::size_t unexpectedAborts = 0;                   // aborts that name no killed worker
  std::size_t unexpectedExits = 0;                    // workers that ended without being killed (restarted too)
  std::size_t refused = 0;
  std::vector<std::string> details;  // of the first unexpected aborts, exits and refusals
  Summary abortedRoundTime;          // aborted rounds, us: BeginUpdate sent -> Abort handled
  Summary rejoin;                    // restarted worker started -> registered again, us
  // Committed rounds pooled over the windows without restarts (but the warm-up) and over those with them.
  Summary withoutRestarts, withRestarts;
  double withoutRoundsPerSecond = 0, withRoundsPerSecond = 0;
  std::size_t withoutAborted = 0, withAborted = 0;
  // After the run: how the coordinator ended (SIGTERM, then its own clean-up), and what the bus left behind.
  std::string coordinatorExit;
  BusResidue residueAfterStop;
  double othersCpuShare = 0;
};

// Progress lines go to `progress`; failures throw BenchFailure after every process is stopped.
SoakResults measureSoak(const SoakBenchConfig& config, std::ostream& progress);

// The mode: measures, then fills the report.
void runSoakBenchmark(const SoakBenchConfig& config, Report& report);

}  // namespace wsync::bench
