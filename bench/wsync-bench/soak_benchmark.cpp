#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include <wsync/bus/transport/bus_address.hpp>
#include <wsync/cli/child_process.hpp>

#include "agents.hpp"
#include "machine_load.hpp"
#include "soak.hpp"
#include "trainer_rounds.hpp"

namespace wsync::bench {
namespace {

// A worker that keeps ending by itself is a crash loop, not a soak.
constexpr std::size_t kMaxUnexpectedExits = 16;
constexpr std::size_t kNever = static_cast<std::size_t>(-1);

// The entries of a folder but . and .. that `counted` (given the name) accepts; nothing when it cannot be read.
std::optional<std::uint32_t> countEntries(const std::string& path,
                                          const std::function<bool(const char*)>& counted = {}) {
  DIR* directory = ::opendir(path.c_str());
  if (directory == nullptr) return std::nullopt;
  std::uint32_t count = 0;
  while (const dirent* entry = ::readdir(directory)) {
    const std::string_view name(entry->d_name);
    if (name != "." && name != ".." && (!counted || counted(entry->d_name))) ++count;
  }
  ::closedir(directory);
  return count;
}

ProcessUsage readProcessUsage(pid_t pid) {
  ProcessUsage usage;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string key; status >> key; status.ignore(std::numeric_limits<std::streamsize>::max(), '\n')) {
    std::uint64_t* bytes = key == "VmRSS:"      ? &usage.rssBytes
                           : key == "RssAnon:"  ? &usage.anonBytes
                           : key == "RssShmem:" ? &usage.shmemBytes
                                                : nullptr;
    if (bytes != nullptr && status >> *bytes) *bytes *= 1024;  // kB
    if (key == "Threads:") status >> usage.threads;
  }
  const auto fds = countEntries("/proc/" + std::to_string(pid) + "/fd");
  const std::vector<std::string> fields = procStatFields(pid);
  usage.fds = fds.value_or(0);
  // A zombie has a status file but no memory and no descriptors: not alive in the sense that matters here.
  usage.alive = fds.has_value() && !fields.empty() && fields[0] != "Z";
  return usage;
}

// Processes whose parent is `parent`, and how many of them are zombies (exited, not reaped).
std::pair<std::uint32_t, std::uint32_t> countChildren(pid_t parent) {
  std::uint32_t zombies = 0;
  const auto children = countEntries("/proc", [parent, &zombies](const char* name) {
    char* end = nullptr;
    const long pid = std::strtol(name, &end, 10);
    if (pid <= 0 || *end != '\0') return false;
    const std::vector<std::string> fields = procStatFields(static_cast<pid_t>(pid));  // [0] state, [1] parent
    if (fields.size() < 2 || fields[1] != std::to_string(parent)) return false;
    if (fields[0] == "Z") ++zombies;
    return true;
  });
  return {children.value_or(0), zombies};
}

// The bus's entries in /dev/shm (control block, arena "...-shm") and in the runtime folder (its sockets): its name,
// or its name then one of `separators` ("wsync-soak-1" must not count "wsync-soak-12").
std::pair<std::uint32_t, std::uint32_t> countBusResidue(const std::string& busName, const std::string& runtimeDir) {
  const auto named = [](const std::string& stem, std::string_view separators) {
    return [stem, separators](std::string_view name) {
      return name.starts_with(stem) && (name.size() == stem.size() || separators.find(name[stem.size()]) != name.npos);
    };
  };
  return {countEntries("/dev/shm", named(bus::controlBlockSegmentName(busName), "-.")).value_or(0),
          countEntries(runtimeDir, named(busName, ".")).value_or(0)};
}

// The workers' agent id in an abort's detail ("worker 'worker-3': process 1234 is gone"), if it names one.
std::optional<std::string> workerNamedBy(const std::string& detail) {
  constexpr std::string_view kPrefix = "worker '";
  const auto end = detail.find('\'', kPrefix.size());
  if (!detail.starts_with(kPrefix) || end == std::string::npos) return std::nullopt;
  return detail.substr(kPrefix.size(), end - kPrefix.size());
}

struct SoakWorker {
  std::string id;
  std::optional<cli::ChildProcess> process;
  Clock::time_point startedAt{};
  bool rejoinPending = false;
  std::optional<std::size_t> restart;  // its entry in SoakResults::restarts while the rejoin is pending
};

class SoakRun {
 public:
  SoakRun(const SoakBenchConfig& config, std::ostream& progress)
      : config_(config),
        progress_(progress),
        rng_(config.seed),
        runtimeDir_(orThrow(bus::runtimeDirectory(), "runtime folder")),
        windowCount_(config.rounds / config.window) {
    results_.busName = "wsync-soak-" + std::to_string(::getpid());
    results_.coordinatorPath = locateProgram("wsync-coordinator", config.binDir, WSYNC_BENCH_COORDINATOR);
    results_.workerPath = locateProgram("wsync-worker", config.binDir, WSYNC_BENCH_WORKER);
    results_.sampleEvery = std::max<std::size_t>(1, config.window / kSoakSamplesPerWindow);
    if (config.restartEvery > 0) {
      restartBegin_ = 2 * config.window;                 // after the warm-up and the restart-free baseline
      restartEnd_ = (windowCount_ - 1) * config.window;  // the last window runs without restarts again
      scheduleKill(restartBegin_ - 1);
    }
    // Reserved up front, so that the benchmark's own bookkeeping does not show as the trainer's growth.
    results_.windows.reserve(windowCount_);
    results_.samples.reserve(windowCount_ * (kSoakSamplesPerWindow + 2) + 1);
    results_.restarts.reserve(config.restartEvery > 0 ? 2 * config.rounds / config.restartEvery + 1 : 0);
    for (auto* times : {&windowTimes_, &abortTimes_, &withoutTimes_, &withTimes_}) times->reserve(config.rounds);
    rejoinTimes_.reserve(results_.restarts.capacity() + kMaxUnexpectedExits);
  }

  ~SoakRun() { stopAll(); }

  SoakResults execute() {
    startBus();
    runStart_ = Clock::now();
    takeSample(0, 0);  // the state before the first round
    for (std::size_t index = 0, round = 0; index < windowCount_; ++index) {
      SoakWindow& window = results_.windows.emplace_back();
      window.warmup = index == 0;
      window.withRestarts = config_.restartEvery > 0 && round >= restartBegin_ && round < restartEnd_;
      if (index > 0 && !window.withRestarts && results_.windows[index - 1].withRestarts) settle(round);
      windowTimes_.clear();
      // The run's processes are its own: the coordinator and the live workers, and the reaped ones.
      const MachineLoad load([this] {
        std::vector<pid_t> pids{coordinator_->pid()};
        for (const SoakWorker& worker : workers_) pids.push_back(worker.process->pid());
        return pids;
      });
      const auto windowStart = Clock::now();
      for (std::size_t step = 0; step < config_.window; ++step, ++round) {
        runRound(round, window);
        if ((step + 1) % results_.sampleEvery == 0 || step + 1 == config_.window) takeSample(round + 1, index);
      }
      window.seconds = std::chrono::duration<double>(Clock::now() - windowStart).count();
      window.othersCpuShare = load.othersShare();
      window.roundTime = summarize(windowTimes_);
      if (window.roundTime.samples > 0) p50EstimateUs_ = window.roundTime.p50;
      progress_ << "window " << index + 1 << "/" << windowCount_ << ": " << fixed(window.roundsPerSecond(), 0)
                << " rounds/s, p50 " << fixed(window.roundTime.p50 / 1000, 2) << " ms, " << window.restarts
                << " restarts, " << window.abortedByRestart + window.abortedOther << " aborted; coordinator RSS "
                << fixed(mib(results_.samples.back().coordinator.rssBytes), 1) << " MiB; others used "
                << percent(window.othersCpuShare).text << " of the CPUs\n";
    }
    stopAll();
    results_.coordinatorExit = coordinator_->describeExit();
    results_.residueAfterStop = countBusResidue(results_.busName, runtimeDir_);
    results_.abortedRoundTime = summarize(std::move(abortTimes_));
    results_.rejoin = summarize(std::move(rejoinTimes_));
    results_.withoutRestarts = summarize(std::move(withoutTimes_));
    results_.withRestarts = summarize(std::move(withTimes_));
    return std::move(results_);
  }

 private:
  // The coordinator, the workers, the trainer: each once the previous one is ready, as the control block shows.
  void startBus() {
    const std::string& bus = results_.busName;
    // Removed after the report counted them: a killed coordinator leaves them, and no other will use this bus name.
    runFiles_.add("/dev/shm/" + bus::controlBlockSegmentName(bus));
    runFiles_.add("/dev/shm/" + bus::controlBlockSegmentName(bus) + "-shm");
    if (auto endpoints = bus::resolveEndpoints(bus)) {
      runFiles_.addEndpoint(endpoints->requests);
      runFiles_.addEndpoint(endpoints->events);
    }
    const auto start = Clock::now();
    coordinator_ = startProgram(results_.coordinatorPath, {"--bus", bus}, SIGTERM);
    while (!view_) {
      throwIfInterrupted();
      checkCoordinator("while starting");
      auto view = bus::ControlBlockView::open(bus);
      if (view && view->coordinatorPid() == static_cast<std::uint32_t>(coordinator_->pid())) {
        view_.emplace(std::move(*view));
      } else if (Clock::now() - start > kSoakCoordinatorStartTimeout) {
        throw BenchFailure("wsync-coordinator on bus " + bus + " not up within " +
                           std::to_string(kSoakCoordinatorStartTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kWorkerJoinPollInterval);
    }
    workers_.resize(config_.workers);
    for (std::size_t index = 0; index < config_.workers; ++index) {
      workers_[index].id = "worker-" + std::to_string(index);
      startWorker(workers_[index], std::nullopt);
    }
    while (markRegistered() < workers_.size()) {
      throwIfInterrupted();
      for (SoakWorker& worker : workers_) {
        if (!worker.process->running()) throw BenchFailure(worker.id + " " + worker.process->describeExit());
      }
      if (Clock::now() - start > kWorkerJoinTimeout) {
        throw BenchFailure(std::to_string(view_->activeAgents()) + " of " + std::to_string(config_.workers) +
                           " workers registered within " + std::to_string(kWorkerJoinTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kWorkerJoinPollInterval);
    }
    trainer_.emplace(bus, "soak-trainer", config_.model);
    results_.tensors = trainer_->manifest().size();
    results_.bytes = trainer_->manifest().totalBytes();
    results_.startupMs = microseconds(Clock::now() - start) / 1000;
  }

  // A process group of its own (Ctrl-C reaches the benchmark alone, which stops the programs in order), none of our
  // descriptors (its fd count is its own); the coordinator dies by SIGTERM with us, so that it removes its segments.
  cli::ChildProcess startProgram(const std::string& path, std::vector<std::string> args, int deathSignal) {
    args.insert(args.end(), {"--log-level", config_.childLogLevel});
    return cli::ChildProcess::spawn(
        path, args,
        {.deathSignal = deathSignal, .ownProcessGroup = true, .closeOtherFds = true, .stopGrace = kProgramStopGrace});
  }

  void startWorker(SoakWorker& worker, std::optional<std::size_t> restart) {
    worker.process = startProgram(results_.workerPath,
                                  {"--bus", results_.busName, "--id", worker.id, "--model", config_.model, "--channel",
                                   "shm", "--step-ms", std::to_string(config_.workerStepMs)},
                                  SIGKILL);
    worker.startedAt = Clock::now();
    worker.rejoinPending = true;
    worker.restart = restart;
  }

  // Clears the pending rejoin of every worker whose current process holds an attached slot; returns their number.
  std::size_t markRegistered() {
    const std::vector<bus::AgentSlotSnapshot> attached = attachedAgents(*view_);
    std::size_t registered = 0;
    for (SoakWorker& worker : workers_) {
      if (std::none_of(attached.begin(), attached.end(), [&](const bus::AgentSlotSnapshot& agent) {
            return agent.agentId == worker.id && agent.pid == static_cast<std::uint32_t>(worker.process->pid());
          })) {
        continue;
      }
      ++registered;
      if (!worker.rejoinPending) continue;
      worker.rejoinPending = false;
      if (!worker.restart && !rejoinCounted_) continue;  // the first start's registration is the start-up's
      rejoinTimes_.push_back(microseconds(Clock::now() - worker.startedAt));
      if (worker.restart) results_.restarts[*worker.restart].rejoinMs = rejoinTimes_.back() / 1000;
      worker.restart.reset();
    }
    return registered;
  }

  void runRound(std::size_t round, SoakWindow& window) {
    throwIfInterrupted();
    rejoinCounted_ = true;
    superviseWorkers(round);
    if (std::any_of(workers_.begin(), workers_.end(), [](const SoakWorker& w) { return w.rejoinPending; })) {
      markRegistered();
      checkRejoinDeadlines();
    }
    // Agents registered, the trainer included; a dead worker counts until the coordinator has seen it go.
    if (view_->activeAgents() < config_.workers + 1) ++window.roundsShortOfWorkers;
    const std::uint64_t version = ++version_;
    trainer_->publish(version,
                      config_.pauseMode == "abort"  ? msg::PauseMode::Abort
                      : config_.pauseMode == "wait" ? msg::PauseMode::Wait
                                                    : msg::PauseMode::Keep,
                      true);
    if (round == nextKill_) {
      restartWorker(round, window);
      scheduleKill(round);
    }
    // A coordinator that died leaves the trainer waiting for a heartbeat refusal: the cause is known now.
    record(trainer_->awaitOutcome(version, kRoundOutcomeTimeout,
                                  [&] { checkCoordinator("with version " + std::to_string(version) + " in flight"); }),
           window);
  }

  // Kills a random worker but worker-0 a random moment after the publish, and starts it again at once.
  void restartWorker(std::size_t round, SoakWindow& window) {
    const double maxDelayUs = p50EstimateUs_ > 0 ? kSoakKillDelayFactor * p50EstimateUs_
                                                 : static_cast<double>(kSoakDefaultKillDelayMax.count());
    const double delayUs = std::uniform_real_distribution<double>(0, maxDelayUs)(rng_);
    SoakWorker& worker = workers_[std::uniform_int_distribution<std::size_t>(1, workers_.size() - 1)(rng_)];
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(delayUs));
    const bool midRound = !trainer_->agent().pollOutcome().has_value();
    const std::string phase = msg::EnumNameRoundPhase(view_->roundState().phase);
    worker.process->stop(std::chrono::milliseconds{0});  // SIGKILL and reap: the coordinator sees the pid gone
    killedIds_.insert(worker.id);
    startWorker(worker, results_.restarts.size());
    results_.restarts.push_back(SoakRestart{round, worker.id, midRound, phase, delayUs, -1});
    ++results_.killPhases[phase];
    ++window.restarts;
    if (midRound) ++window.restartsMidRound;
  }

  // The next kill: gaps uniform in [mean/2, 3 mean/2] rounds, irregular yet close to rounds / mean in number.
  void scheduleKill(std::size_t after) {
    const std::size_t low = std::max<std::size_t>(1, config_.restartEvery / 2);
    nextKill_ =
        after + std::uniform_int_distribution<std::size_t>(low, std::max(low, 3 * config_.restartEvery / 2))(rng_);
    if (nextKill_ >= restartEnd_) nextKill_ = kNever;
  }

  void checkCoordinator(const std::string& when) {
    if (!coordinator_->running()) throw BenchFailure("wsync-coordinator " + coordinator_->describeExit() + " " + when);
  }

  // A dead coordinator ends the run; a worker that ended by itself is reported and started again.
  void superviseWorkers(std::size_t round) {
    checkCoordinator("before round " + std::to_string(round + 1));
    for (SoakWorker& worker : workers_) {
      if (worker.process->running()) continue;
      ++results_.unexpectedExits;
      addDetail("before round " + std::to_string(round + 1) + ": " + worker.id + " (pid " +
                std::to_string(worker.process->pid()) + ") " + worker.process->describeExit() + " by itself");
      if (results_.unexpectedExits > kMaxUnexpectedExits) {
        throw BenchFailure(std::to_string(results_.unexpectedExits) +
                           " workers ended by themselves; the last: " + results_.details.back());
      }
      killedIds_.insert(worker.id);  // the rounds its death aborts are accounted to it, not to the bus
      startWorker(worker, std::nullopt);
    }
  }

  // The last window starts as the second did, every worker registered, so that no earlier restart aborts its rounds.
  void settle(std::size_t round) {
    for (superviseWorkers(round); markRegistered() < workers_.size(); superviseWorkers(round)) {
      throwIfInterrupted();
      checkRejoinDeadlines();
      std::this_thread::sleep_for(kWorkerJoinPollInterval);
    }
  }

  void checkRejoinDeadlines() {
    for (SoakWorker& worker : workers_) {
      if (!worker.rejoinPending || Clock::now() - worker.startedAt < kSoakRejoinTimeout) continue;
      throw BenchFailure(worker.id + " (pid " + std::to_string(worker.process->pid()) +
                         ") was started again but has not registered within " +
                         std::to_string(kSoakRejoinTimeout.count()) + " ms (its stderr says why)");
    }
  }

  void record(const trainer_agent::PublishOutcome& outcome, SoakWindow& window) {
    ++window.rounds;
    const double totalUs = microseconds(outcome.total);
    if (outcome.committed()) {
      windowTimes_.push_back(totalUs);
      if (outcome.version == 1) results_.firstRoundMs = totalUs / 1000;
      if (!window.warmup) (window.withRestarts ? withTimes_ : withoutTimes_).push_back(totalUs);
    } else if (outcome.kind == trainer_agent::OutcomeKind::Aborted) {
      abortTimes_.push_back(totalUs);
      ++results_.abortsByReason[msg::EnumNameAbortReason(outcome.reason)];
      const auto named = workerNamedBy(outcome.detail);
      if (named && killedIds_.contains(*named)) {
        ++window.abortedByRestart;
        return;
      }
      ++window.abortedOther;
      ++results_.unexpectedAborts;
      addDetail("version " + std::to_string(outcome.version) + " aborted: " + msg::EnumNameAbortReason(outcome.reason) +
                ": " + outcome.detail);
    } else {
      ++results_.refused;
      addDetail("version " + std::to_string(outcome.version) + " refused: " + outcome.detail);
    }
  }

  void addDetail(std::string detail) {
    if (results_.details.size() < kSoakMaxListedDetails) results_.details.push_back(std::move(detail));
  }

  void takeSample(std::size_t round, std::size_t window) {
    SoakSample sample{.window = window,
                      .round = round,
                      .seconds = round == 0 ? 0 : std::chrono::duration<double>(Clock::now() - runStart_).count(),
                      .coordinator = readProcessUsage(coordinator_->pid()),
                      .trainer = readProcessUsage(::getpid())};
    for (std::size_t index = 0; index < workers_.size(); ++index) {
      const ProcessUsage usage = readProcessUsage(workers_[index].process->pid());
      if (index == 0) sample.resident = usage;
      if (!usage.alive) continue;
      ++sample.liveWorkers;
      sample.workersMaxRss = std::max(sample.workersMaxRss, usage.rssBytes);
      sample.workersSumRss += usage.rssBytes;
      sample.workersMaxFds = std::max(sample.workersMaxFds, usage.fds);
    }
    std::tie(sample.shmSegments, sample.runtimeFiles) = countBusResidue(results_.busName, runtimeDir_);
    std::tie(sample.children, sample.zombies) = countChildren(::getpid());
    for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
      const auto snapshot = view_->agentSlot(slot);
      if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active) ++sample.activeSlots;
      if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Dead) ++sample.deadSlots;
    }
    results_.samples.push_back(sample);
  }

  // The trainer first, then the workers (together), then the coordinator, which removes its segments. Idempotent.
  void stopAll() noexcept {
    trainer_.reset();
    for (SoakWorker& worker : workers_) {
      if (worker.process) worker.process->signal(SIGTERM);
    }
    for (SoakWorker& worker : workers_) {
      if (worker.process) worker.process->stop(kProgramStopGrace);
    }
    view_.reset();
    if (coordinator_) coordinator_->stop(kProgramStopGrace);
  }

  const SoakBenchConfig& config_;
  std::ostream& progress_;
  std::mt19937_64 rng_;
  const std::string runtimeDir_;
  const std::size_t windowCount_;
  std::size_t restartBegin_ = 0;
  std::size_t restartEnd_ = 0;
  std::size_t nextKill_ = kNever;
  double p50EstimateUs_ = 0;
  std::uint64_t version_ = 0;
  bool rejoinCounted_ = false;  // from the first round on, every (re)start's rejoin is timed
  Clock::time_point runStart_{};
  std::set<std::string> killedIds_;
  std::vector<double> windowTimes_, abortTimes_, rejoinTimes_, withoutTimes_, withTimes_;
  SoakResults results_;
  // Stopped in reverse order by stopAll(), and again (a no-op then) by their destructors.
  RunFiles runFiles_;  // the bus's sockets and segments, removed once the coordinator is gone
  std::optional<cli::ChildProcess> coordinator_;
  std::optional<bus::ControlBlockView> view_;
  std::vector<SoakWorker> workers_;
  std::optional<BenchTrainer> trainer_;
};

}  // namespace

SoakResults measureSoak(const SoakBenchConfig& config, std::ostream& progress) {
  const std::size_t windows = config.window > 0 ? config.rounds / config.window : 0;
  const std::size_t minWindows = config.restartEvery > 0 ? kSoakMinWindowsWithRestarts : kSoakMinWindows;
  if (config.window < kSoakMinWindowRounds || config.rounds % config.window != 0 || windows < minWindows) {
    throw BenchFailure("--rounds must be a multiple of --window (at least " + std::to_string(kSoakMinWindowRounds) +
                       " rounds) and give at least " + std::to_string(minWindows) +
                       " windows: a warm-up, a first window without restarts, " +
                       (config.restartEvery > 0 ? "one or more with restarts, " : "") + "and a last one");
  }
  if (config.restartEvery > 0 && config.workers < 2) {
    throw BenchFailure("restarts need at least 2 workers: worker-0 is never restarted (or give --restart-every 0)");
  }
  (void)catalogManifest(config.model);  // an unknown model fails here, before any process starts
  const MachineLoad load;
  SoakResults results = SoakRun(config, progress).execute();
  results.othersCpuShare = load.othersShare();  // every process of the run is reaped by now
  return results;
}

}  // namespace wsync::bench
