#include "round.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/state/control_block.hpp>
#include <wsync/coordinator/coordinator_options.hpp>
#include <wsync/tools/child_process.hpp>
#include <wsync/tools/coordinator_thread.hpp>
#include <wsync/trainer_agent/trainer_agent.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "machine_load.hpp"
#include "tensor_memory.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kKiB = 1024;
constexpr double kMiB = 1024.0 * 1024.0;

double microseconds(std::chrono::nanoseconds duration) {
  return std::max(0.0, static_cast<double>(duration.count()) / 1e3);
}

// The per-round samples of one bus, in microseconds.
struct RoundSamples {
  std::vector<double> total, sending, overhead, untilPlan, afterSend, caller, apply;
};

// `count` wsync-mon processes watching one bus in live-view mode (redrawing 4 times a second into /dev/null, a
// snapshot a second), as operators' terminals would. Stopped together (SIGTERM) and reaped when this goes.
class MonitorProcesses {
 public:
  MonitorProcesses(const std::string& binary, const std::string& busName, std::size_t count)
      : devNull_(::open("/dev/null", O_WRONLY | O_CLOEXEC)) {
    if (devNull_ < 0) throw BenchFailure("cannot open /dev/null");
    const tools::ChildOptions options{.stdoutFd = devNull_, .deathSignal = SIGTERM, .stopGrace = kMonitorStopGrace};
    for (std::size_t index = 0; index < count; ++index) {
      monitors_.push_back(tools::ChildProcess::spawn(binary, {"--bus", busName, "--refresh-ms", "250"}, options));
    }
  }
  ~MonitorProcesses() {
    for (const tools::ChildProcess& monitor : monitors_) monitor.signal(SIGTERM);
    monitors_.clear();
    ::close(devNull_);
  }
  MonitorProcesses(const MonitorProcesses&) = delete;
  MonitorProcesses& operator=(const MonitorProcesses&) = delete;

 private:
  int devNull_;
  std::vector<tools::ChildProcess> monitors_;
};

// One bus under test: its coordinator (a thread of this process), its worker processes and its trainer, all for one
// manifest. Members are declared in the order they must outlive one another: the trainer goes first, then the
// workers, then the coordinator.
class BenchBus {
 public:
  BenchBus(const std::string& busName, const std::string& model, std::size_t workerCount, std::uint64_t bucketBytes,
           std::ostream& progress)
      : name_(busName), manifest_(catalogManifest(model)), weights_(manifest_) {
    const auto plan = orThrow(bus::BucketPlan::build(manifest_, bucketBytes, coordinator::kDefaultAlignment),
                              "model " + model + ": bucket plan");
    result_.workers = workerCount;
    result_.model = model;
    result_.tensors = manifest_.size();
    result_.bytes = manifest_.totalBytes();
    result_.buckets = plan.bucketCount();
    progress << "round: " << workerCount << " workers, " << model << " (" << result_.tensors << " tensors, "
             << fixed(static_cast<double>(result_.bytes) / kMiB, 2) << " MiB, " << result_.buckets << " buckets of "
             << bucketBytes / kKiB << " KiB), bus " << busName << '\n';
    {
      // Before any process of this bus starts, on a quiet machine.
      const TensorMemory scratch(manifest_);
      result_.tail =
          measureReceiveTail(plan, coordinator::kDefaultBufferCount, weights_.constTensors(), scratch.tensors());
    }
    coordinator::CoordinatorOptions options;
    options.bus = busName;
    options.bucketBytes = bucketBytes;
    coordinator_ = std::make_unique<tools::CoordinatorThread>(options);
    view_.emplace(orThrow(bus::ControlBlockView::open(busName), "control block of " + busName));
    const auto joinStart = Clock::now();
    for (std::size_t index = 0; index < workerCount; ++index) {
      const std::string id = "worker-" + std::to_string(index);
      workers_.start(busName + " " + id, {"agent-round-worker", "--bus", busName, "--id", id, "--model", model});
    }
    waitForWorkers();
    result_.joinMs = microseconds(Clock::now() - joinStart) / 1000;
    trainer_ = orThrow(trainer_agent::TrainerAgent::start({.bus = busName, .agentId = "trainer"}), "trainer agent");
    orThrow(trainer_->declareManifest(manifest_.tensors()), "trainer agent");
    progress << "  " << workerCount << " registered in " << static_cast<long>(result_.joinMs) << " ms\n";
  }

  // The next version, published as soon as the last one is applied everywhere: back to back, yet every round starts
  // with idle workers, as rounds seconds apart do. Without that wait the Pause would queue behind each worker's copy
  // of the last version into its weights (O(bytes): data work) and count as overhead.
  void runRound(bool measured) {
    throwIfInterrupted();
    const std::uint64_t version = nextVersion_++;
    const auto called = Clock::now();
    orThrow(trainer_->publish(version, weights_.constTensors(), {.label = {}, .pauseMode = msg::PauseMode::Keep}),
            "publish version " + std::to_string(version));
    const auto outcome = trainer_->waitOutcome(kRoundOutcomeTimeout);
    const auto returned = Clock::now();
    if (!outcome || !outcome->committed()) {
      workers_.throwIfAnyExited();  // the cause, a dead worker, rather than the symptom
      throw BenchFailure(result_.model + ", version " + std::to_string(version) + ": " +
                         (outcome ? std::string(trainer_agent::toString(outcome->kind)) + " (" +
                                        msg::EnumNameAbortReason(outcome->reason) + "): " + outcome->detail
                                  : "no outcome within " + std::to_string(kRoundOutcomeTimeout.count()) + " ms"));
    }
    const double applyUs = waitForApplied(version);
    if (version == 1) result_.firstRoundMs = microseconds(outcome->total) / 1000;
    if (!measured) {
      ++result_.warmup;
      return;
    }
    const double total = microseconds(outcome->total);
    const double sending = microseconds(outcome->sending);
    const double untilPlan = microseconds(outcome->untilPlan);
    RoundSamples& samples = monitored_ ? withMonitors_ : samples_;
    samples.total.push_back(total);
    samples.sending.push_back(sending);
    samples.overhead.push_back(std::max(0.0, total - sending));
    samples.untilPlan.push_back(untilPlan);
    samples.afterSend.push_back(std::max(0.0, total - sending - untilPlan));
    samples.caller.push_back(microseconds(returned - called));
    samples.apply.push_back(applyUs);
  }

  // Rounds in the middle of a measurement with `count` wsync-mon processes attached, after they had time to settle.
  void runWithMonitors(const std::string& monBinary, std::size_t count, std::size_t rounds) {
    const MonitorProcesses watching(monBinary, name_, count);
    std::this_thread::sleep_for(kMonitorSettle);
    monitored_ = true;
    for (std::size_t round = 0; round < rounds; ++round) runRound(true);
    monitored_ = false;
  }

  // Stops the trainer and reaps the workers (their CPU time then counts as this process's); the coordinator stops
  // with this object.
  RoundMeasurement finish() {
    trainer_->stop();
    workers_.stopAll();
    result_.total = summarize(std::move(samples_.total));
    result_.sending = summarize(std::move(samples_.sending));
    result_.overhead = summarize(std::move(samples_.overhead));
    result_.untilPlan = summarize(std::move(samples_.untilPlan));
    result_.afterSend = summarize(std::move(samples_.afterSend));
    result_.caller = summarize(std::move(samples_.caller));
    result_.apply = summarize(std::move(samples_.apply));
    result_.withMonitors = summarize(std::move(withMonitors_.total));
    return result_;
  }

 private:
  // Until every worker holds a slot it has attached to (registered, heartbeating); keeps the worker slots.
  void waitForWorkers() {
    const auto deadline = Clock::now() + kWorkerJoinTimeout;
    for (;;) {
      throwIfInterrupted();
      workers_.throwIfAnyExited();  // a worker that failed to start is reported now, not at the deadline
      slots_.clear();
      for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
        const auto snapshot = view_->agentSlot(slot);
        if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active && snapshot->role == msg::Role::Worker &&
            snapshot->agentAttached) {
          slots_.push_back(slot);
        }
      }
      if (slots_.size() == result_.workers) return;
      if (Clock::now() > deadline) {
        throw BenchFailure(std::to_string(view_->activeAgents()) + " of " + std::to_string(result_.workers) +
                           " workers registered within " + std::to_string(kWorkerJoinTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kWorkerJoinPollInterval);
    }
  }

  // Microseconds from the outcome until every worker reports `version` applied (its copy into its weights is done).
  double waitForApplied(std::uint64_t version) {
    const auto start = Clock::now();
    while (!std::all_of(slots_.begin(), slots_.end(),
                        [&](std::uint32_t slot) { return view_->appliedVersion(slot) >= version; })) {
      if (Clock::now() - start > kApplyTimeout) {
        workers_.throwIfAnyExited();
        throw BenchFailure(result_.model + ": version " + std::to_string(version) +
                           " committed but not applied by every worker within " +
                           std::to_string(kApplyTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kApplyPollInterval);
    }
    return microseconds(Clock::now() - start);
  }

  const std::string name_;
  const bus::Manifest manifest_;
  TensorMemory weights_;  // the trainer's, read by its I/O thread until it stops
  RoundMeasurement result_;
  RoundSamples samples_;
  RoundSamples withMonitors_;
  bool monitored_ = false;
  std::uint64_t nextVersion_ = 1;
  std::unique_ptr<tools::CoordinatorThread> coordinator_;
  std::optional<bus::ControlBlockView> view_;
  std::vector<std::uint32_t> slots_;
  Agents workers_;
  std::unique_ptr<trainer_agent::TrainerAgent> trainer_;
};

class RoundRun {
 public:
  RoundRun(const RoundBenchConfig& config, std::ostream& progress) : config_(config), progress_(progress) {}

  // One manifest, `workerCount` workers: warm-up, then the measured rounds; with --monitors, rounds without them,
  // with them and without again, so that the two phases without bracket the one with.
  RoundMeasurement measure(const std::string& model, std::size_t workerCount) {
    const MachineLoad load;
    const std::unique_ptr<BenchBus> bus = open(model, workerCount);
    progress_ << "  " << config_.warmup << " warm-up + " << config_.rounds << " rounds"
              << (config_.monitors > 0 ? ", " + std::to_string(config_.rounds) + " more with " +
                                             std::to_string(config_.monitors) + " monitors and " +
                                             std::to_string(config_.rounds) + " without"
                                       : std::string())
              << '\n';
    for (std::size_t round = 0; round < config_.warmup + config_.rounds; ++round) {
      bus->runRound(round >= config_.warmup);
    }
    if (config_.monitors > 0) {
      bus->runWithMonitors(config_.monBinary, config_.monitors, config_.rounds);
      for (std::size_t round = 0; round < config_.rounds; ++round) bus->runRound(true);
    }
    RoundMeasurement result = bus->finish();
    result.othersCpuShare = load.othersShare();
    return report(result);
  }

  // Several manifests, `workerCount` workers each, every one on its own bus at the same time; after the warm-up they
  // take turns in blocks of kCountBlock rounds, the order rotating every turn.
  std::vector<RoundMeasurement> measureSideBySide(const std::vector<std::string>& models, std::size_t workerCount) {
    // Each worker holds its weights and, from the first round on, a staging copy; the trainer one more copy.
    std::uint64_t needed = 0;
    for (const std::string& model : models) needed += (2 * workerCount + 2) * catalogManifest(model).totalBytes();
    const std::uint64_t available = availableMemoryBytes();
    if (available > 0 && static_cast<double>(needed) > kMaxRoundMemoryShare * static_cast<double>(available)) {
      throw BenchFailure("the tensor-count sweep needs " + fixed(static_cast<double>(needed) / kMiB / 1024, 1) +
                         " GiB side by side, " + fixed(static_cast<double>(available) / kMiB / 1024, 1) +
                         " GiB available: use fewer --count-workers, smaller --count-models or --no-count-sweep");
    }
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
      for (std::size_t k = 0; k < buses.size(); ++k) {
        BenchBus& bus = *buses[(turn + k) % buses.size()];
        for (std::size_t round = 0; round < std::min(kCountBlock, config_.countRounds - done); ++round) {
          bus.runRound(true);
        }
      }
    }
    // Every bus's agents stopped before the load is read, so that all their CPU time counts as the benchmark's.
    std::vector<RoundMeasurement> results;
    for (auto& bus : buses) results.push_back(bus->finish());
    const double othersShare = load.othersShare();
    for (RoundMeasurement& result : results) {
      result.othersCpuShare = othersShare;
      report(result);
    }
    return results;
  }

  const std::string& busExample() const { return busExample_; }

 private:
  std::unique_ptr<BenchBus> open(const std::string& model, std::size_t workerCount) {
    busExample_ = "wsync-bench-round-" + std::to_string(::getpid()) + "-" + std::to_string(buses_++);
    return std::make_unique<BenchBus>(busExample_, model, workerCount, config_.bucketKiB * kKiB, progress_);
  }

  RoundMeasurement report(const RoundMeasurement& result) {
    progress_ << "  " << result.model << ", " << result.workers << " workers: overhead p50 "
              << fixed(result.overhead.p50 / 1000, 3) << " ms (round " << fixed(result.total.p50 / 1000, 3)
              << ", send " << fixed(result.sending.p50 / 1000, 3) << "); first round "
              << fixed(result.firstRoundMs, 1) << " ms";
    if (result.withMonitors.samples > 0) {
      progress_ << "; with monitors p50 " << fixed(result.withMonitors.p50 / 1000, 3) << " ms";
    }
    progress_ << "; other processes used " << percent(result.othersCpuShare) << " of the CPUs\n";
    return result;
  }

  const RoundBenchConfig& config_;
  std::ostream& progress_;
  std::size_t buses_ = 0;
  std::string busExample_;
};

}  // namespace

RoundResults measureRounds(const RoundBenchConfig& config, std::ostream& progress) {
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
