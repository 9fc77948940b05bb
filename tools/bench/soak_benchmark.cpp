#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <wsync/bus/transport/bus_address.hpp>
#include <wsync/tools/child_process.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "machine_load.hpp"
#include "run_files.hpp"
#include "soak.hpp"
#include "trainer_rounds.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A worker that keeps ending by itself is a crash loop, not a soak: the run stops after this many.
constexpr std::size_t kMaxUnexpectedExits = 16;
constexpr std::size_t kNever = static_cast<std::size_t>(-1);

msg::PauseMode pauseModeOf(const std::string& name) {
  if (name == "abort") return msg::PauseMode::Abort;
  if (name == "wait") return msg::PauseMode::Wait;
  return msg::PauseMode::Keep;
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
  std::optional<tools::ChildProcess> process;
  Clock::time_point startedAt{};
  bool rejoinPending = false;
  std::optional<std::size_t> restart;  // its entry in SoakResults::restarts while the rejoin is pending
};

class SoakRun {
 public:
  SoakRun(const SoakBenchConfig& config, std::ostream& progress)
      : config_(config),
        progress_(progress),
        pauseMode_(pauseModeOf(config.pauseMode)),
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
      nextKill_ = restartBegin_ + drawGap() - 1;
      if (nextKill_ >= restartEnd_) nextKill_ = kNever;
    }
    // Reserved up front: the benchmark's own bookkeeping must not show as the trainer's growth.
    results_.windows.reserve(windowCount_);
    results_.samples.reserve(windowCount_ * (kSoakSamplesPerWindow + 2) + 1);
    results_.restarts.reserve(config.restartEvery > 0 ? 2 * config.rounds / config.restartEvery + 1 : 0);
    for (auto* times : {&windowTimes_, &abortTimes_, &withoutTimes_, &withTimes_}) times->reserve(config.rounds);
    rejoinTimes_.reserve(results_.restarts.capacity() + kMaxUnexpectedExits);
    if (!config.childLog.empty()) {  // last: nothing after it throws, so the destructor closes it
      childLogFd_ = ::open(config.childLog.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (childLogFd_ < 0) throw BenchFailure("--child-log " + config.childLog + ": " + std::strerror(errno));
    }
  }

  ~SoakRun() {
    stopAll();
    if (childLogFd_ != STDERR_FILENO) ::close(childLogFd_);
  }
  SoakRun(const SoakRun&) = delete;
  SoakRun& operator=(const SoakRun&) = delete;

  SoakResults execute() {
    startBus();
    progress_ << "soak: " << config_.rounds << " rounds in " << windowCount_ << " windows of " << config_.window
              << ", " << config_.workers << " workers, " << config_.model << ", "
              << (config_.restartEvery > 0 ? "a restart every ~" + std::to_string(config_.restartEvery) + " rounds"
                                           : "no restarts")
              << "; bus " << results_.busName << '\n';
    runStart_ = Clock::now();
    takeSample(0, 0);  // the state before the first round
    for (std::size_t index = 0, round = 0; index < windowCount_; ++index) {
      SoakWindow& window = results_.windows.emplace_back();
      window.firstRound = round;
      window.warmup = index == 0;
      window.withRestarts = config_.restartEvery > 0 && round >= restartBegin_ && round < restartEnd_;
      if (index > 0 && !window.withRestarts && results_.windows[index - 1].withRestarts) settle(round);
      windowTimes_.clear();
      // This run's processes are its own: the coordinator and the live workers, and the reaped ones.
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
      progress_ << "  window " << index + 1 << "/" << windowCount_ << (window.warmup ? " (warm-up)" : "")
                << (window.withRestarts ? "" : ", no restarts") << ": " << fixed(window.roundsPerSecond(), 0)
                << " rounds/s, p50 " << fixed(window.roundTime.p50 / 1000, 2) << " ms, p99 "
                << fixed(window.roundTime.p99 / 1000, 2) << " ms, " << window.restarts << " restarts, "
                << window.abortedByRestart + window.abortedOther << " aborted; coordinator "
                << fixed(static_cast<double>(results_.samples.back().coordinator.rssBytes) / (1 << 20), 1)
                << " MiB / " << results_.samples.back().coordinator.fds << " fds; others used "
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
  // wsync-coordinator on a bus of this run, the workers, and the trainer in this process; each waits for the
  // previous one to be ready (the control block says so), every wait bounded.
  void startBus() {
    const std::string& bus = results_.busName;
    // A coordinator that stops cleanly removes its segments and sockets (the report counts what it left first); one
    // that was killed cannot, and no later coordinator will purge them, since the bus name is unique to this run.
    runFiles_.add("/dev/shm/" + bus::controlBlockSegmentName(bus));
    runFiles_.add("/dev/shm/" + bus::controlBlockSegmentName(bus) + "-shm");
    if (auto endpoints = bus::resolveEndpoints(bus)) {
      runFiles_.addEndpoint(endpoints->requests);
      runFiles_.addEndpoint(endpoints->events);
    }
    const auto start = Clock::now();
    coordinator_ = startProgram(results_.coordinatorPath, {"--bus", bus, "--log-level", config_.childLogLevel}, SIGTERM);
    while (!view_) {
      throwIfInterrupted();
      if (!coordinator_->running()) throw BenchFailure("wsync-coordinator " + coordinator_->describeExit());
      auto view = bus::ControlBlockView::open(bus);
      if (view && view->coordinatorPid() == static_cast<std::uint32_t>(coordinator_->pid())) view_.emplace(std::move(*view));
      if (Clock::now() - start > kSoakCoordinatorStartTimeout) {
        throw BenchFailure("wsync-coordinator on bus " + bus + " not up within " +
                           std::to_string(kSoakCoordinatorStartTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kSoakJoinPollInterval);
    }
    workers_.resize(config_.workers);
    for (std::size_t index = 0; index < config_.workers; ++index) {
      workers_[index].id = "worker-" + std::to_string(index);
      startWorker(workers_[index], std::nullopt);
    }
    const auto joinDeadline = Clock::now() + kSoakWorkerJoinTimeout;
    while (markRegistered() < workers_.size()) {
      throwIfInterrupted();
      for (SoakWorker& worker : workers_) {
        if (!worker.process->running()) throw BenchFailure(worker.id + " " + worker.process->describeExit());
      }
      if (Clock::now() > joinDeadline) {
        throw BenchFailure(std::to_string(view_->activeAgents()) + " of " + std::to_string(config_.workers) +
                           " workers registered within " + std::to_string(kSoakWorkerJoinTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kSoakJoinPollInterval);
    }
    trainer_.emplace(bus, "soak-trainer", config_.model);
    results_.tensors = trainer_->manifest().size();
    results_.bytes = trainer_->manifest().totalBytes();
    results_.startupMs = microseconds(Clock::now() - start) / 1000;
    progress_ << "  coordinator, " << config_.workers << " workers and the trainer registered in "
              << static_cast<long>(results_.startupMs) << " ms\n";
  }

  // A program of the run: a process group of its own (Ctrl-C reaches the benchmark alone, which stops the programs in
  // order), none of the benchmark's descriptors (its fd count is its own), `deathSignal` should the benchmark die
  // (SIGTERM for the coordinator, so that it still removes its segments).
  tools::ChildProcess startProgram(const std::string& path, const std::vector<std::string>& args, int deathSignal) {
    return tools::ChildProcess::spawn(path, args,
                                      {.stderrFd = childLogFd_, .deathSignal = deathSignal, .ownProcessGroup = true,
                                       .closeOtherFds = true, .stopGrace = kSoakStopGrace});
  }

  // Starts (or starts again) a worker under its agent id; its rejoin is timed from now.
  void startWorker(SoakWorker& worker, std::optional<std::size_t> restart) {
    worker.process = startProgram(results_.workerPath,
                                  {"--bus", results_.busName, "--id", worker.id, "--model", config_.model, "--channel",
                                   "shm", "--step-ms", std::to_string(config_.workerStepMs), "--log-level",
                                   config_.childLogLevel},
                                  SIGKILL);
    worker.startedAt = Clock::now();
    worker.rejoinPending = true;
    worker.restart = restart;
  }

  // Clears the pending rejoin of every worker whose current process holds an attached slot; returns how many workers
  // are registered that way.
  std::size_t markRegistered() {
    const std::vector<bus::AgentSlotSnapshot> attached = attachedAgents(*view_);
    std::size_t registered = 0;
    for (SoakWorker& worker : workers_) {
      const bool found = std::any_of(attached.begin(), attached.end(), [&](const bus::AgentSlotSnapshot& agent) {
        return agent.agentId == worker.id && agent.pid == static_cast<std::uint32_t>(worker.process->pid());
      });
      if (!found) continue;
      ++registered;
      if (!worker.rejoinPending) continue;
      worker.rejoinPending = false;
      if (worker.restart || rejoinCounted_) {
        const double elapsedUs = microseconds(Clock::now() - worker.startedAt);
        rejoinTimes_.push_back(elapsedUs);
        if (worker.restart) results_.restarts[*worker.restart].rejoinMs = elapsedUs / 1000;
        worker.restart.reset();
      }
    }
    return registered;
  }

  void runRound(std::size_t round, SoakWindow& window) {
    throwIfInterrupted();
    rejoinCounted_ = true;  // from here on every (re)start's rejoin is timed
    superviseWorkers(round);
    if (std::any_of(workers_.begin(), workers_.end(), [](const SoakWorker& w) { return w.rejoinPending; })) {
      markRegistered();
      checkRejoinDeadlines();
    }
    // Agents registered, the trainer included; a dead worker counts until the coordinator has seen it go.
    if (view_->activeAgents() < config_.workers + 1) ++window.roundsShortOfWorkers;
    const std::uint64_t version = ++version_;
    trainer_->publish(version, pauseMode_, true);
    if (round == nextKill_) {
      restartWorker(round, window);
      nextKill_ = round + drawGap();
      if (nextKill_ >= restartEnd_) nextKill_ = kNever;
    }
    // A coordinator that died leaves the trainer waiting for a heartbeat refusal: the cause is known now.
    record(trainer_->awaitOutcome(version, kSoakRoundOutcomeTimeout,
                                  [this, version] {
                                    if (coordinator_->running()) return;
                                    throw BenchFailure("version " + std::to_string(version) +
                                                       " in flight: wsync-coordinator " + coordinator_->describeExit());
                                  }),
           window);
  }

  // Kills one random worker (never the resident worker-0) a random moment after the publish, and starts it again
  // under the same agent id at once, as a supervisor would.
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

  // A worker that ended without being killed is a finding: it is reported and started again, and the run goes on.
  // A dead coordinator ends the run.
  void superviseWorkers(std::size_t round) {
    if (!coordinator_->running()) {
      throw BenchFailure("wsync-coordinator " + coordinator_->describeExit() + " before round " +
                         std::to_string(round + 1));
    }
    for (SoakWorker& worker : workers_) {
      if (worker.process->running()) continue;
      ++results_.unexpectedExits;
      addDetail("before round " + std::to_string(round + 1) + ": " + worker.id + " (pid " +
                std::to_string(worker.process->pid()) + ") " + worker.process->describeExit() + " by itself");
      if (results_.unexpectedExits > kMaxUnexpectedExits) {
        throw BenchFailure(std::to_string(results_.unexpectedExits) + " workers ended by themselves; the last: " +
                           results_.details.back());
      }
      killedIds_.insert(worker.id);  // the rounds its death aborts are accounted to it, not to the bus
      startWorker(worker, std::nullopt);
    }
  }

  // The last window starts as the second did, with every worker registered: a restart in the last rounds before it
  // must not abort one of its rounds.
  void settle(std::size_t round) {
    for (;;) {
      throwIfInterrupted();
      superviseWorkers(round);
      if (markRegistered() == workers_.size()) return;
      checkRejoinDeadlines();
      std::this_thread::sleep_for(kSoakJoinPollInterval);
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
    if (outcome.kind == trainer_agent::OutcomeKind::Committed) {
      ++window.committed;
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
      addDetail("version " + std::to_string(outcome.version) + " aborted: " +
                msg::EnumNameAbortReason(outcome.reason) + ": " + outcome.detail);
    } else {
      ++window.refused;
      ++results_.refused;
      addDetail("version " + std::to_string(outcome.version) + " refused: " + outcome.detail);
    }
  }

  void addDetail(std::string detail) {
    if (results_.details.size() < kSoakMaxListedDetails) results_.details.push_back(std::move(detail));
  }

  void takeSample(std::size_t round, std::size_t window) {
    SoakSample sample;
    sample.window = window;
    sample.round = round;
    sample.seconds = round == 0 ? 0 : std::chrono::duration<double>(Clock::now() - runStart_).count();
    sample.coordinator = readProcessUsage(coordinator_->pid());
    sample.trainer = readProcessUsage(::getpid());
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

  // Uniform in [mean/2, 3 mean/2]: restarts come irregularly, yet their number is close to rounds / mean.
  std::size_t drawGap() {
    const std::size_t mean = config_.restartEvery;
    const std::size_t low = std::max<std::size_t>(1, mean / 2);
    return std::uniform_int_distribution<std::size_t>(low, std::max(low, mean + mean / 2))(rng_);
  }

  // The trainer first (goodbye, its I/O thread joined), then the workers (SIGTERM to all, so that they stop
  // together), then the coordinator, which removes its segments and sockets on SIGTERM. Safe to call twice.
  void stopAll() noexcept {
    trainer_.reset();
    for (SoakWorker& worker : workers_) {
      if (worker.process) worker.process->signal(SIGTERM);
    }
    for (SoakWorker& worker : workers_) {
      if (worker.process) worker.process->stop(kSoakStopGrace);
    }
    view_.reset();
    if (coordinator_) coordinator_->stop(kSoakStopGrace);
  }

  const SoakBenchConfig& config_;
  std::ostream& progress_;
  const msg::PauseMode pauseMode_;
  std::mt19937_64 rng_;
  const std::string runtimeDir_;
  const std::size_t windowCount_;
  int childLogFd_ = STDERR_FILENO;  // the programs' stderr: --child-log, or the benchmark's own
  std::size_t restartBegin_ = 0;
  std::size_t restartEnd_ = 0;
  std::size_t nextKill_ = kNever;
  double p50EstimateUs_ = 0;
  std::uint64_t version_ = 0;
  bool rejoinCounted_ = false;
  Clock::time_point runStart_{};
  std::set<std::string> killedIds_;
  std::vector<double> windowTimes_, abortTimes_, rejoinTimes_, withoutTimes_, withTimes_;
  SoakResults results_;
  // Stopped in reverse order by stopAll(), and again (a no-op then) by their destructors.
  RunFiles runFiles_;  // the bus's sockets and segments, removed once the coordinator is gone
  std::optional<tools::ChildProcess> coordinator_;
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
  const MachineLoad load;
  SoakResults results = SoakRun(config, progress).execute();
  results.othersCpuShare = load.othersShare();  // every process of the run is reaped by now
  return results;
}

}  // namespace wsync::bench
