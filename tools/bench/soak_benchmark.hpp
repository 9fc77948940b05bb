#pragma once
// `wsync-bench soak`: thousands of update rounds back to back through the real programs, with random worker restarts,
// and whether anything grows over time. A real wsync-coordinator on a bus of its own, N real wsync-worker processes
// (shm channel) and a TrainerAgent in this process publishing version after version; every so often one worker
// (never worker-0, the resident that shows a worker's own growth) is SIGKILLed at a random moment and started again
// under the same agent id. Every window of rounds gives rounds/s, round-time percentiles, aborts, and samples of RSS,
// open fds and threads of the coordinator, the trainer and the workers, the bus's /dev/shm segments and runtime
// files, and the child processes. The same-run baseline is the run's own beginning: the first window after the
// warm-up, which like the last has no restarts.
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "bus_residue.hpp"
#include "process_usage.hpp"
#include "soak_config.hpp"
#include "stats.hpp"

namespace wsync::bench {

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

}  // namespace wsync::bench
