#include "round_benchmark.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/transport/bus_address.hpp>
#include <wsync/bus/state/control_block.hpp>
#include <wsync/coordinator/coordinator_options.hpp>
#include <wsync/trainer_agent/trainer_agent.hpp>

#include "agent_processes.hpp"
#include "bench_config.hpp"
#include "bench_failure.hpp"
#include "catalog_manifest.hpp"
#include "coordinator_thread.hpp"
#include "interruption.hpp"
#include "latency_benchmark.hpp"
#include "machine_load.hpp"
#include "report_format.hpp"
#include "tensor_memory.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = kKiB * 1024;

std::uint64_t nanoseconds(std::chrono::nanoseconds duration) {
  return duration.count() > 0 ? static_cast<std::uint64_t>(duration.count()) : 0;
}

double milliseconds(std::chrono::nanoseconds duration) { return static_cast<double>(duration.count()) / 1e6; }

// MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read (then nothing is refused).
std::uint64_t availableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * kKiB;
  }
  return 0;
}

// The per-round samples of one bus, in nanoseconds.
struct RoundSamples {
  std::vector<std::uint64_t> total;
  std::vector<std::uint64_t> sending;
  std::vector<std::uint64_t> overhead;
  std::vector<std::uint64_t> untilPlan;
  std::vector<std::uint64_t> afterSend;
  std::vector<std::uint64_t> caller;
  std::vector<std::uint64_t> apply;
};

std::string describeOutcome(const trainer_agent::PublishOutcome& outcome) {
  return std::string(trainer_agent::toString(outcome.kind)) + " (" + msg::EnumNameAbortReason(outcome.reason) +
         "): " + outcome.detail;
}

// One bus under test: its coordinator (a thread of this process), its worker processes and its trainer, all for
// one manifest. Members are declared in the order they must outlive one another: the trainer goes first, then the
// workers, then the coordinator.
class BenchBus {
 public:
  BenchBus(const std::string& busName, const std::string& model, std::size_t workerCount, std::uint64_t bucketBytes,
           std::ostream& progress)
      : manifest_(catalogManifest(model)), weights_(manifest_) {
    auto plan = bus::BucketPlan::build(manifest_, bucketBytes, coordinator::kDefaultAlignment);
    if (!plan) throw BenchFailure("model " + model + ": bucket plan: " + plan.error().describe());
    result_.workers = workerCount;
    result_.model = model;
    result_.tensors = manifest_.size();
    result_.bytes = manifest_.totalBytes();
    result_.buckets = plan->bucketCount();
    progress << "round: " << workerCount << " worker" << (workerCount == 1 ? "" : "s") << ", " << model << " ("
             << result_.tensors << " tensors, " << fixed(static_cast<double>(result_.bytes) / kMiB, 2) << " MiB, "
             << result_.buckets << " bucket" << (result_.buckets == 1 ? "" : "s") << " of " << bucketBytes / kKiB
             << " KiB), bus " << busName << '\n';
    {
      // Before any process of this bus starts, on a quiet machine.
      TensorMemory scratch(manifest_);
      result_.tail = measureReceiveTail(*plan, coordinator::kDefaultBufferCount, weights_.constTensors(),
                                        scratch.tensors());
    }

    coordinator::CoordinatorOptions options;
    options.bus = busName;
    options.bucketBytes = bucketBytes;
    coordinator_ = std::make_unique<CoordinatorThread>(options);
    auto view = bus::ControlBlockView::open(busName);
    if (!view) throw BenchFailure("control block of " + busName + ": " + view.error().describe());
    view_.emplace(std::move(*view));

    const auto joinStart = Clock::now();
    for (std::size_t index = 0; index < workerCount; ++index) {
      const std::string id = "worker-" + std::to_string(index);
      workers_.spawn(busName + " " + id, {"agent-round-worker", "--parent", std::to_string(::getpid()), "--bus",
                                          busName, "--id", id, "--model", model});
    }
    waitForWorkers();
    result_.joinMs = milliseconds(Clock::now() - joinStart);

    auto trainer = trainer_agent::TrainerAgent::start({.bus = busName, .agentId = "trainer"});
    if (!trainer) throw BenchFailure("trainer agent: " + trainer.error().describe());
    trainer_ = std::move(*trainer);
    if (auto declared = trainer_->declareManifest(manifest_.tensors()); !declared) {
      throw BenchFailure("trainer agent: " + declared.error().describe());
    }
    progress << "  " << workerCount << " registered in " << static_cast<long>(result_.joinMs) << " ms\n";
  }

  // The next version, published as soon as the last one is applied everywhere: back to back, yet every round starts
  // with idle workers, as rounds seconds apart do. Without that wait the Pause would queue behind each worker's
  // copy of the last version into its weights (O(bytes): data work) and count as overhead.
  void runRound(bool measured) {
    throwIfInterrupted();
    const std::uint64_t version = nextVersion_++;
    const auto called = Clock::now();
    const trainer_agent::PublishOptions keep{.label = {}, .pauseMode = msg::PauseMode::Keep};
    auto published = trainer_->publish(version, weights_.constTensors(), keep);
    if (!published) {
      throw BenchFailure("publish version " + std::to_string(version) + ": " + published.error().describe());
    }
    const auto outcome = trainer_->waitOutcome(kRoundOutcomeTimeout);
    const auto returned = Clock::now();
    if (!outcome || !outcome->committed()) {
      workers_.throwIfAnyExited();  // the cause, a dead worker, rather than the symptom
      throw BenchFailure(result_.model + ", version " + std::to_string(version) + ": " +
                         (outcome ? describeOutcome(*outcome)
                                  : "no outcome within " + std::to_string(kRoundOutcomeTimeout.count()) + " ms"));
    }
    const std::uint64_t applyNs = waitForApplied(version);
    if (version == 1) result_.firstRoundMs = milliseconds(outcome->total);
    if (!measured) {
      ++result_.warmup;
      return;
    }
    const std::uint64_t total = nanoseconds(outcome->total);
    const std::uint64_t sending = nanoseconds(outcome->sending);
    const std::uint64_t untilPlan = nanoseconds(outcome->untilPlan);
    samples_.total.push_back(total);
    samples_.sending.push_back(sending);
    samples_.overhead.push_back(total > sending ? total - sending : 0);
    samples_.untilPlan.push_back(untilPlan);
    samples_.afterSend.push_back(total > sending + untilPlan ? total - sending - untilPlan : 0);
    samples_.caller.push_back(nanoseconds(returned - called));
    samples_.apply.push_back(applyNs);
  }

  // The round times measured so far (ns), taken out: a measurement in phases takes each phase's.
  std::vector<std::uint64_t> takeTotals() {
    std::vector<std::uint64_t> totals = std::move(samples_.total);
    samples_ = RoundSamples{};
    return totals;
  }

  // Stops the trainer and reaps the workers (their CPU time then counts as this process's); the coordinator stops
  // with this object.
  void stopAgents() {
    trainer_->stop();
    workers_.stopAll();
  }

  RoundMeasurement summary() {
    result_.total = summarize(std::move(samples_.total));
    result_.sending = summarize(std::move(samples_.sending));
    result_.overhead = summarize(std::move(samples_.overhead));
    result_.untilPlan = summarize(std::move(samples_.untilPlan));
    result_.afterSend = summarize(std::move(samples_.afterSend));
    result_.caller = summarize(std::move(samples_.caller));
    result_.apply = summarize(std::move(samples_.apply));
    return result_;
  }

 private:
  // Until every worker holds a slot it has attached to (registered, heartbeating); keeps the worker slots.
  void waitForWorkers() {
    const auto deadline = Clock::now() + kWorkerJoinTimeout;
    for (;;) {
      throwIfInterrupted();
      workers_.throwIfAnyExited();  // a worker that failed to start is reported now, not at the deadline
      if (view_->activeAgents() == result_.workers) {
        slots_.clear();
        for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
          const auto snapshot = view_->agentSlot(slot);
          if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active && snapshot->role == msg::Role::Worker &&
              snapshot->agentAttached) {
            slots_.push_back(slot);
          }
        }
        if (slots_.size() == result_.workers) return;
      }
      if (Clock::now() > deadline) {
        throw BenchFailure(std::to_string(view_->activeAgents()) + " of " + std::to_string(result_.workers) +
                           " workers registered within " + std::to_string(kWorkerJoinTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kWorkerJoinPollInterval);
    }
  }

  // How long after the outcome until every worker reports `version` applied (its copy into its weights is done).
  std::uint64_t waitForApplied(std::uint64_t version) {
    const auto start = Clock::now();
    const auto deadline = start + kApplyTimeout;
    for (;;) {
      const bool all = std::all_of(slots_.begin(), slots_.end(),
                                   [&](std::uint32_t slot) { return view_->appliedVersion(slot) >= version; });
      if (all) return nanoseconds(Clock::now() - start);
      if (Clock::now() > deadline) {
        workers_.throwIfAnyExited();
        throw BenchFailure(result_.model + ": version " + std::to_string(version) +
                           " committed but not applied by every worker within " +
                           std::to_string(kApplyTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kApplyPollInterval);
    }
  }

  const bus::Manifest manifest_;
  TensorMemory weights_;  // the trainer's, read by its I/O thread until it stops
  RoundMeasurement result_;
  RoundSamples samples_;
  std::uint64_t nextVersion_ = 1;
  std::unique_ptr<CoordinatorThread> coordinator_;
  std::optional<bus::ControlBlockView> view_;
  std::vector<std::uint32_t> slots_;
  AgentProcesses workers_;
  std::unique_ptr<trainer_agent::TrainerAgent> trainer_;
};

// `count` wsync-mon processes watching one bus in live-view mode (redrawing 4 times a second into /dev/null, a
// snapshot a second), as operators' terminals would. SIGTERMed and reaped when this goes.
class MonitorProcesses {
 public:
  MonitorProcesses(const std::string& binary, const std::string& busName, std::size_t count) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    for (std::size_t index = 0; index < count; ++index) {
      std::vector<std::string> args{binary, "--bus", busName, "--refresh-ms", "250"};
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      pid_t pid = -1;
      if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
        posix_spawn_file_actions_destroy(&actions);
        stop();
        throw BenchFailure("cannot start " + binary);
      }
      pids_.push_back(pid);
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  ~MonitorProcesses() { stop(); }
  MonitorProcesses(const MonitorProcesses&) = delete;
  MonitorProcesses& operator=(const MonitorProcesses&) = delete;

 private:
  void stop() noexcept {
    for (const pid_t pid : pids_) ::kill(pid, SIGTERM);
    for (const pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
    pids_.clear();
  }
  std::vector<pid_t> pids_;
};

class RoundRun {
 public:
  RoundRun(const RoundBenchConfig& config, std::ostream& progress) : config_(config), progress_(progress) {}

  // One manifest, `workerCount` workers: warm-up, then `rounds` measured rounds in a row.
  RoundMeasurement measure(const std::string& model, std::size_t workerCount) {
    const MachineLoad load;
    const std::unique_ptr<BenchBus> bus = open(model, workerCount);
    progress_ << "  " << config_.warmup << " warm-up + " << config_.rounds << " rounds\n";
    for (std::size_t round = 0; round < config_.warmup + config_.rounds; ++round) {
      bus->runRound(round >= config_.warmup);
    }
    bus->stopAgents();
    RoundMeasurement result = bus->summary();
    result.othersCpuShare = load.othersShare();
    report(result);
    return result;
  }

  // Several manifests, `workerCount` workers each, every one on its own bus at the same time; after the warm-up
  // they take turns in blocks of kCountBlock rounds, the order rotating every turn.
  std::vector<RoundMeasurement> measureSideBySide(const std::vector<std::string>& models, std::size_t workerCount) {
    checkMemory(models, workerCount);
    const MachineLoad load;
    std::vector<std::unique_ptr<BenchBus>> buses;
    for (const std::string& model : models) buses.push_back(open(model, workerCount));
    progress_ << "  side by side: " << config_.warmup << " warm-up + " << config_.countRounds
              << " rounds each, in turns of " << kCountBlock << '\n';
    for (auto& bus : buses) {
      for (std::size_t round = 0; round < config_.warmup; ++round) bus->runRound(false);
    }
    std::size_t turn = 0;
    for (std::size_t done = 0; done < config_.countRounds; done += kCountBlock, ++turn) {
      const std::size_t count = std::min(kCountBlock, config_.countRounds - done);
      for (std::size_t k = 0; k < buses.size(); ++k) {
        BenchBus& bus = *buses[(turn + k) % buses.size()];
        for (std::size_t round = 0; round < count; ++round) bus.runRound(true);
      }
    }
    for (auto& bus : buses) bus->stopAgents();
    const double othersShare = load.othersShare();
    std::vector<RoundMeasurement> results;
    for (auto& bus : buses) {
      results.push_back(bus->summary());
      results.back().othersCpuShare = othersShare;
      report(results.back());
    }
    return results;
  }

  const std::string& busExample() const { return busExample_; }

  // Rounds without monitors, with `monitors` wsync-mon processes watching, and without again: the two phases
  // without them bracket the one with them, so that a machine whose load drifts does not favour either.
  MonitorMeasurement measureMonitors(const std::string& model, std::size_t workerCount, std::size_t monitors,
                                     const std::string& monBinary) {
    const MachineLoad load;
    const std::unique_ptr<BenchBus> bus = open(model, workerCount);
    MonitorMeasurement result;
    result.model = model;
    result.workers = workerCount;
    result.monitors = monitors;
    result.roundsPerPhase = config_.rounds;
    progress_ << "  " << config_.warmup << " warm-up, then " << config_.rounds << " rounds without monitors, "
              << config_.rounds << " with " << monitors << ", " << config_.rounds << " without\n";
    for (std::size_t round = 0; round < config_.warmup; ++round) bus->runRound(false);
    auto runPhase = [&] {
      for (std::size_t round = 0; round < config_.rounds; ++round) bus->runRound(true);
      return bus->takeTotals();
    };
    std::vector<std::uint64_t> without = runPhase();
    {
      MonitorProcesses watching(monBinary, busExample_, monitors);
      std::this_thread::sleep_for(kMonitorSettle);
      result.with = summarize(runPhase());
    }
    const std::vector<std::uint64_t> after = runPhase();
    without.insert(without.end(), after.begin(), after.end());
    result.without = summarize(std::move(without));
    bus->stopAgents();
    result.othersCpuShare = load.othersShare();
    progress_ << "  round p50 " << fixed(result.without.p50Us / 1000, 3) << " ms without monitors, "
              << fixed(result.with.p50Us / 1000, 3) << " ms with " << monitors << "\n";
    return result;
  }

 private:
  std::unique_ptr<BenchBus> open(const std::string& model, std::size_t workerCount) {
    const std::string busName = "wsync-bench-round-" + std::to_string(::getpid()) + "-" + std::to_string(buses_++);
    busExample_ = busName;
    return std::make_unique<BenchBus>(busName, model, workerCount, config_.bucketKiB * kKiB, progress_);
  }

  // Each worker holds its weights and, from the first round on, a staging copy; the trainer one more copy.
  void checkMemory(const std::vector<std::string>& models, std::size_t workerCount) const {
    std::uint64_t needed = 0;
    for (const std::string& model : models) needed += (2 * workerCount + 2) * catalogManifest(model).totalBytes();
    const std::uint64_t available = availableMemoryBytes();
    if (available > 0 && static_cast<double>(needed) > kMaxRoundMemoryShare * static_cast<double>(available)) {
      throw BenchFailure("the tensor-count sweep needs " + fixed(static_cast<double>(needed) / (kMiB * 1024.0), 1) +
                         " GiB side by side, " + fixed(static_cast<double>(available) / (kMiB * 1024.0), 1) +
                         " GiB available: use fewer --count-workers, smaller --count-models or --no-count-sweep");
    }
  }

  void report(const RoundMeasurement& result) {
    progress_ << "  " << result.model << ", " << result.workers << " worker" << (result.workers == 1 ? "" : "s")
              << ": overhead p50 "
              << fixed(result.overhead.p50Us / 1000, 3) << " ms (round " << fixed(result.total.p50Us / 1000, 3)
              << ", send " << fixed(result.sending.p50Us / 1000, 3) << "); first round "
              << fixed(result.firstRoundMs, 1) << " ms; other processes used "
              << static_cast<int>(result.othersCpuShare * 100) << "% of the CPUs\n";
  }

  const RoundBenchConfig& config_;
  std::ostream& progress_;
  std::size_t buses_ = 0;
  std::string busExample_;
};

}  // namespace

MonitorMeasurement runMonitorBenchmark(const RoundBenchConfig& config, std::size_t monitors,
                                       const std::string& monBinary, std::ostream& progress) {
  RoundRun run(config, progress);
  return run.measureMonitors(config.models.front(), config.workerCounts.front(), monitors, monBinary);
}

RoundResults runRoundBenchmarks(const RoundBenchConfig& config, std::ostream& progress) {
  const MachineLoad load;
  RoundResults results;
  progress << "baseline: request/reply round trip, " << config.baselineRoundTrips << " per path\n";
  results.baselineBefore = runRoundTripBenchmark(config.baselineRoundTrips, kDefaultBlock, progress);

  RoundRun run(config, progress);
  for (const std::string& model : config.models) {
    for (const std::size_t workers : config.workerCounts) results.workerSweep.push_back(run.measure(model, workers));
  }
  if (!config.countModels.empty()) results.countSweep = run.measureSideBySide(config.countModels, config.countWorkers);

  progress << "baseline again, after the rounds\n";
  results.baselineAfter = runRoundTripBenchmark(config.baselineRoundTrips, kDefaultBlock, progress);
  results.busExample = run.busExample();
  results.othersCpuShare = load.othersShare();
  return results;
}

}  // namespace wsync::bench
