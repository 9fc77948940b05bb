#include "round.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <thread>

#include <wsync/coordinator/coordinator_options.hpp>
#include <wsync/coordinator/coordinator_thread.hpp>
#include <wsync/worker_agent/worker_agent.hpp>

#include "agents.hpp"
#include "bus.hpp"
#include "machine_load.hpp"
#include "trainer_rounds.hpp"

namespace wsync::bench {
namespace {

// One configuration (N workers, one manifest): its rounds' phases, in microseconds.
struct RoundMeasurement {
  std::size_t workers = 0;
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  double firstRoundMs = 0;  // round 1: carries the manifest to every worker and faults in their staging
  double othersCpuShare = 0;
  // total: BeginUpdate -> Commit handled; sending: the trainer's send; overhead: total - sending; untilPlan: ->
  // TransferPlan; afterSend: send returned -> Commit; caller: publish() -> outcome; apply: -> every worker applied.
  std::vector<double> total{}, sending{}, overhead{}, untilPlan{}, afterSend{}, caller{}, apply{}, withMonitors{};
};

double p50(const std::vector<double>& samples) { return summarize(samples).p50; }

// One bus under test: coordinator (a thread here), worker processes and trainer; members in reverse stopping order.
class BenchBus {
 public:
  BenchBus(const std::string& busName, const std::string& model, std::size_t workerCount, std::uint64_t bucketBytes,
           std::ostream& progress)
      : name_(busName) {
    const bus::Manifest manifest = catalogManifest(model);
    result_ = {.workers = workerCount, .model = model, .tensors = manifest.size(), .bytes = manifest.totalBytes()};
    progress << "round: " << workerCount << " workers, " << model << " (" << result_.tensors << " tensors, "
             << fixed(mib(result_.bytes), 2) << " MiB), bus " << busName << '\n';
    coordinator_ = std::make_unique<coordinator::CoordinatorThread>(
        coordinator::CoordinatorOptions{.bus = busName, .bucketBytes = bucketBytes});
    view_.emplace(orThrow(bus::ControlBlockView::open(busName), "control block of " + busName));
    const auto joinStart = Clock::now();
    for (std::size_t index = 0; index < workerCount; ++index) {
      const std::string id = "worker-" + std::to_string(index);
      workers_.start(busName + " " + id, "agent-round-worker", RoundWorkerOptions{busName, id, model});
    }
    // Until every worker holds a slot it has attached to (registered, heartbeating).
    while (slots_.size() < workerCount) {
      throwIfInterrupted();
      workers_.throwIfAnyExited();  // a worker that failed to start is reported now, not at the deadline
      if (Clock::now() - joinStart > kWorkerJoinTimeout) {
        throw BenchFailure(std::to_string(slots_.size()) + " of " + std::to_string(workerCount) +
                           " workers registered within " + std::to_string(kWorkerJoinTimeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kWorkerJoinPollInterval);
      slots_.clear();
      for (const bus::AgentSlotSnapshot& agent : attachedAgents(*view_)) {
        if (agent.role == msg::Role::Worker) slots_.push_back(agent.slot);
      }
    }
    trainer_.emplace(busName, "trainer", model);
    progress << "  " << workerCount << " registered in " << fixed(microseconds(Clock::now() - joinStart) / 1000, 0)
             << " ms\n";
  }

  // Published once the last version is applied everywhere: back to back, yet starting on idle workers, so that the
  // Pause does not queue behind each worker's copy of the last version (data work) and count as overhead.
  void runRound(bool measured) {
    const std::uint64_t version = nextVersion_++;
    const auto called = Clock::now();
    trainer_->publish(version, msg::PauseMode::Keep);
    const auto outcome = trainer_->awaitOutcome(version, kRoundOutcomeTimeout);
    const auto returned = Clock::now();
    if (!outcome.committed()) {
      workers_.throwIfAnyExited();  // the cause, a dead worker, rather than the symptom
      throw BenchFailure(result_.model + ", version " + std::to_string(version) + ": " +
                         std::string(trainer_agent::toString(outcome.kind)) + " (" +
                         msg::EnumNameAbortReason(outcome.reason) + "): " + outcome.detail);
    }
    const auto applied = [&](std::uint32_t slot) { return view_->appliedVersion(slot) >= version; };
    while (!std::all_of(slots_.begin(), slots_.end(), applied)) {
      if (Clock::now() - returned > kApplyTimeout) {
        workers_.throwIfAnyExited();
        throw BenchFailure(result_.model + ": version " + std::to_string(version) +
                           " not applied by every worker "
                           "within " +
                           std::to_string(kApplyTimeout.count()) + " ms of its commit");
      }
      std::this_thread::sleep_for(kApplyPollInterval);
    }
    const double total = microseconds(outcome.total);
    if (version == 1) result_.firstRoundMs = total / 1000;
    if (!measured) return;
    if (monitored_) return result_.withMonitors.push_back(total);
    const double sending = microseconds(outcome.sending);
    const double untilPlan = microseconds(outcome.untilPlan);
    result_.total.push_back(total);
    result_.sending.push_back(sending);
    result_.overhead.push_back(std::max(0.0, total - sending));
    result_.untilPlan.push_back(untilPlan);
    result_.afterSend.push_back(std::max(0.0, total - sending - untilPlan));
    result_.caller.push_back(microseconds(returned - called));
    result_.apply.push_back(microseconds(Clock::now() - returned));
  }

  // Rounds with `count` wsync-mon processes in live view into /dev/null, once they had time to settle.
  void runWithMonitors(const std::string& monBinary, std::size_t count, std::size_t rounds) {
    const int devNull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devNull < 0) throw BenchFailure("cannot open /dev/null");
    const std::unique_ptr<const int, void (*)(const int*)> closer(&devNull, [](const int* fd) { ::close(*fd); });
    const cli::ChildOptions options{.stdoutFd = devNull, .deathSignal = SIGTERM, .stopGrace = kProgramStopGrace};
    std::vector<cli::ChildProcess> monitors;
    for (std::size_t i = 0; i < count; ++i) {
      monitors.push_back(cli::ChildProcess::spawn(monBinary, {"--bus", name_, "--refresh-ms", "250"}, options));
    }
    std::this_thread::sleep_for(kMonitorSettle);
    monitored_ = true;
    for (std::size_t round = 0; round < rounds; ++round) runRound(true);
    monitored_ = false;
    for (const cli::ChildProcess& monitor : monitors) monitor.signal(SIGTERM);  // all at once, then reaped
  }

  // Stops the trainer and reaps the workers, whose CPU time then counts as ours; the coordinator goes with this.
  RoundMeasurement finish() {
    trainer_->stop();
    workers_.stopAll();
    return result_;
  }

 private:
  const std::string name_;
  RoundMeasurement result_;
  bool monitored_ = false;
  std::uint64_t nextVersion_ = 1;
  std::unique_ptr<coordinator::CoordinatorThread> coordinator_;
  std::optional<bus::ControlBlockView> view_;
  std::vector<std::uint32_t> slots_;  // the workers'
  Agents workers_;
  std::optional<BenchTrainer> trainer_;
};

class RoundRun {
 public:
  RoundRun(const RoundBenchConfig& config, std::ostream& progress) : config_(config), progress_(progress) {
    if (config.monitors > 0) monBinary_ = locateProgram("wsync-mon", "", WSYNC_BENCH_MON);
  }

  // Each manifest on a bus of its own, all at once (the worker sweep: one), taking turns in blocks of kCountBlock, the
  // order rotating; with `monitored`, then rounds with --monitors and without again (two phases bracket the one with).
  std::vector<RoundMeasurement> measure(const std::vector<std::string>& models, std::size_t workerCount,
                                        std::size_t rounds, bool monitored) {
    // Each worker holds its weights and, from the first round on, a staging copy; the trainer one more copy.
    std::uint64_t needed = 0;
    for (const std::string& model : models) needed += (2 * workerCount + 2) * catalogManifest(model).totalBytes();
    const std::uint64_t available = availableMemoryBytes();
    if (available > 0 && static_cast<double>(needed) > kMaxRoundMemoryShare * static_cast<double>(available)) {
      throw BenchFailure(std::to_string(workerCount) + " workers of " + std::to_string(models.size()) +
                         " manifest(s) side by side need " + gib(needed) + ", " + gib(available) +
                         " available: use fewer workers, smaller manifests or --no-count-sweep");
    }
    const MachineLoad load;
    std::vector<std::unique_ptr<BenchBus>> buses;
    for (const std::string& model : models) {
      const std::string name = "wsync-bench-round-" + std::to_string(::getpid()) + "-" + std::to_string(buses_++);
      buses.push_back(std::make_unique<BenchBus>(name, model, workerCount, config_.bucketKiB * 1024, progress_));
    }
    for (auto& bus : buses) {
      for (std::size_t round = 0; round < config_.warmup; ++round) bus->runRound(false);
    }
    for (std::size_t done = 0, turn = 0; done < rounds; done += kCountBlock, ++turn) {
      for (std::size_t k = 0; k < buses.size(); ++k) {
        for (std::size_t round = 0; round < std::min(kCountBlock, rounds - done); ++round) {
          buses[(turn + k) % buses.size()]->runRound(true);
        }
      }
    }
    for (std::size_t b = 0; monitored && b < buses.size(); ++b) {
      buses[b]->runWithMonitors(monBinary_, config_.monitors, rounds);
      for (std::size_t round = 0; round < rounds; ++round) buses[b]->runRound(true);
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

 private:
  void report(const RoundMeasurement& m) {
    progress_ << "  " << m.model << ", " << m.workers << " workers: overhead p50 " << fixed(p50(m.overhead) / 1000, 3)
              << " ms (round " << fixed(p50(m.total) / 1000, 3) << ", send " << fixed(p50(m.sending) / 1000, 3) << ")"
              << (m.withMonitors.empty() ? ""
                                         : "; with monitors, round " + fixed(p50(m.withMonitors) / 1000, 3) + " ms")
              << "; other processes used " << percent(m.othersCpuShare).text << " of the CPUs\n";
  }

  const RoundBenchConfig& config_;
  std::ostream& progress_;
  std::string monBinary_;
  std::size_t buses_ = 0;
};

}  // namespace

int runRoundWorker(const RoundWorkerOptions& options) {
  // SIGTERM, blocked in every thread, is taken by sigtimedwait alone: no handler or EINTR inside the agent's code.
  sigset_t termination;
  sigemptyset(&termination);
  sigaddset(&termination, SIGTERM);
  if (::pthread_sigmask(SIG_BLOCK, &termination, nullptr) != 0) throw BenchFailure("cannot block SIGTERM");
  const bus::Manifest manifest = catalogManifest(options.model);
  TensorMemory weights(manifest);  // the engine's weights: every page written once, before registration
  worker_agent::WorkerOptions workerOptions{.bus = options.bus, .agentId = options.id};
  for (std::size_t index = 0; index < manifest.size(); ++index) {
    const bus::TensorSpec& spec = manifest.tensors()[index];
    orThrow(workerOptions.bindings.bind(spec.name, spec.dtype, spec.shape, weights.tensors()[index]), "bind");
  }
  // An idle engine: the pause returns at once. The last pause's time tells a gone benchmark from one between runs.
  std::atomic<Clock::rep> lastPause{Clock::now().time_since_epoch().count()};
  worker_agent::PauseHooks hooks{.pause =
                                     [&lastPause](msg::PauseMode, std::uint64_t) {
                                       lastPause.store(Clock::now().time_since_epoch().count(),
                                                       std::memory_order_relaxed);
                                       return worker_agent::PauseResult{};
                                     },
                                 .resume = [](std::uint64_t) {}};
  auto agent = orThrow(worker_agent::WorkerAgent::start(std::move(workerOptions), std::move(hooks)), "worker agent");
  const timespec slice{std::chrono::seconds(kRoundWorkerSignalSlice).count(), 0};
  while (::sigtimedwait(&termination, nullptr, &slice) != SIGTERM) {
    if (Clock::now() - Clock::time_point{Clock::duration{lastPause.load()}} > kAgentIdleTimeout) {
      agent->stop();
      throw BenchFailure("no round for " + std::to_string(kAgentIdleTimeout.count()) + " ms: the benchmark is gone");
    }
  }
  agent->stop();  // Goodbye: the coordinator frees the slot at once
  return 0;
}

void runRoundBenchmark(const RoundBenchConfig& c, Report& report) {
  const MachineLoad load;
  const LatencyComparison before = runRoundTripBenchmark(c.baselineRoundTrips, kDefaultBlock, std::cerr);
  RoundRun run(c, std::cerr);
  std::vector<RoundMeasurement> workerSweep;
  for (const std::string& model : c.models) {
    for (const std::size_t workers : c.workerCounts) {
      workerSweep.push_back(run.measure({model}, workers, c.rounds, c.monitors > 0)[0]);
    }
  }
  std::vector<RoundMeasurement> countSweep;
  if (!c.countModels.empty()) countSweep = run.measure(c.countModels, c.countWorkers, c.countRounds, false);
  const LatencyComparison after = runRoundTripBenchmark(c.baselineRoundTrips, kDefaultBlock, std::cerr);
  report.json["others_cpu_share"] = load.othersShare();

  report.parameters().update(Json{{"workers", c.workerCounts},
                                  {"models", c.models},
                                  {"count_models", c.countModels},
                                  {"count_workers", c.countWorkers},
                                  {"warmup_rounds", c.warmup},
                                  {"rounds", c.rounds},
                                  {"count_rounds", c.countRounds},
                                  {"count_block", kCountBlock},
                                  {"bucket_kib", c.bucketKiB},
                                  {"buffers", coordinator::kDefaultBufferCount},
                                  {"baseline_round_trips", c.baselineRoundTrips},
                                  {"pause_mode", "keep"},
                                  {"monitors", c.monitors}});
  const double rawUs = (before.raw.p50 + after.raw.p50) / 2;  // what overheads are compared with
  Table baseline(latencyColumns({"when", ""}));
  baseline.row(latencyRow("before the rounds", before));
  baseline.row(latencyRow("after the rounds", after));
  report.section("baseline", "Baseline: request/reply round trip (microseconds)",
                 "`wsync-bench bus`'s round trip between one agent process and this one, through raw cppzmq and "
                 "through the bus library. Overheads below are also counted in raw round trips (the mean raw p50, " +
                     fixed(rawUs, 1) + " us).",
                 baseline);

  const auto ms = [](double us) { return Cell(us / 1000, fixed(us / 1000, us < 10'000 ? 3 : 1)); };
  const auto p = [&ms](const std::vector<double>& samples, double Summary::*figure = &Summary::p50) {
    return ms(summarize(samples).*figure);
  };
  const auto manifest = [](const RoundMeasurement& m) {
    return "`" + m.model + "` (" + std::to_string(m.tensors) + " tensors, " +
           fixed(mib(m.bytes), m.bytes < kMiB ? 3 : 0) + " MiB)";
  };
  const auto goalMet = [](const RoundMeasurement& m) { return p50(m.overhead) / 1000 <= kMaxRoundOverheadMs; };
  // Each sweep in two tables: round and overhead, then the phases' p50s (each on its own: they need not add up).
  const auto overheads = [&](const std::vector<RoundMeasurement>& sweep, bool withGoal) {
    Table table({{"model", "manifest"},
                 {"workers", "workers"},
                 {"total_p50_ms", "round p50"},
                 {"total_p90_ms", "round p90"},
                 {"sending_p50_ms", "send p50"},
                 {"overhead_p50_ms", "overhead p50"},
                 {"overhead_p90_ms", "overhead p90"},
                 {"in_raw_rtts", "in raw RTTs"},
                 {"goal_met", "goal (p50 <= " + fixed(kMaxRoundOverheadMs, 0) + " ms at " +
                                  std::to_string(kRoundGoalWorkers) + " workers)"}});
    for (const RoundMeasurement& m : sweep) {
      table.row({manifest(m), m.workers, p(m.total), p(m.total, &Summary::p90), p(m.sending), p(m.overhead),
                 p(m.overhead, &Summary::p90), number(rawUs > 0 ? p50(m.overhead) / rawUs : 0, 1),
                 withGoal && m.workers == kRoundGoalWorkers ? verdict(goalMet(m)) : Cell()});
    }
    return table;
  };
  const auto phases = [&](const std::vector<RoundMeasurement>& sweep) {
    Table table({{"model", "manifest"},
                 {"workers", "workers"},
                 {"until_plan_ms", "begin -> plan"},
                 {"after_send_ms", "send returned -> commit"},
                 {"caller_ms", "publish -> outcome"},
                 {"apply_ms", "commit -> all applied"},
                 {"first_round_ms", "first round"},
                 {"others_cpu_share", "others' CPU"}});
    for (const RoundMeasurement& m : sweep) {
      table.row({manifest(m), m.workers, p(m.untilPlan), p(m.afterSend), p(m.caller), p(m.apply),
                 number(m.firstRoundMs, 1), percent(m.othersCpuShare)});
    }
    return table;
  };
  if (!workerSweep.empty()) {
    std::string goals;
    for (const RoundMeasurement& m : workerSweep) {
      if (m.workers != kRoundGoalWorkers) continue;
      goals += " Goal, overhead p50 at most " + fixed(kMaxRoundOverheadMs, 0) + " ms with " +
               std::to_string(kRoundGoalWorkers) + " workers, `" + m.model + "`: " + verdict(goalMet(m)).text + " (" +
               ms(p50(m.overhead)).text + " ms).";
    }
    report.section("worker_sweep", "Round overhead by number of workers (milliseconds)",
                   "Round: `PublishOutcome::total`, BeginUpdate sent until the trainer handles the Commit. Send: the "
                   "trainer's send of every bucket, the data. Overhead: round - send, round by round; with data an "
                   "upper bound, as the receivers still copy the last buckets when the send returns." +
                       goals,
                   overheads(workerSweep, true));
    report.section("worker_phases", "Where the time goes, by number of workers (milliseconds, p50)", "",
                   phases(workerSweep));
  }
  if (c.monitors > 0) {
    Table monitors({{"model", "manifest"},
                    {"workers", "workers"},
                    {"rounds_without", "rounds without"},
                    {"without_p50_ms", "p50"},
                    {"without_p99_ms", "p99"},
                    {"rounds_with", "rounds with"},
                    {"with_p50_ms", "p50"},
                    {"with_p99_ms", "p99"},
                    {"ratio", "with/without p50"},
                    {"goal_met", "goal (<= " + ratio(kMaxMonitorSlowdown).text + ")"}});
    for (const RoundMeasurement& m : workerSweep) {
      const double slowdown = p50(m.total) > 0 ? p50(m.withMonitors) / p50(m.total) : 0;
      monitors.row({manifest(m), m.workers, m.total.size(), p(m.total), p(m.total, &Summary::p99),
                    m.withMonitors.size(), p(m.withMonitors), p(m.withMonitors, &Summary::p99), ratio(slowdown),
                    verdict(slowdown <= kMaxMonitorSlowdown)});
    }
    report.section("monitors",
                   "Round time with and without " + std::to_string(c.monitors) + " monitors attached (milliseconds)",
                   "Rounds without, with the monitors (live view into /dev/null), without again; \"without\" pools "
                   "both phases.",
                   monitors);
  }
  if (!countSweep.empty()) {
    Table counts = overheads(countSweep, false);
    Table countPhases = phases(countSweep);
    // The most tensors over the fewest, p50 over p50 (the sweep keeps the bytes equal).
    const auto [fewest, most] = std::minmax_element(countSweep.begin(), countSweep.end(),
                                                    [](const auto& a, const auto& b) { return a.tensors < b.tensors; });
    const auto over = [&](std::vector<double> RoundMeasurement::*phase) {
      return ratio(p50((*fewest).*phase) > 0 ? p50((*most).*phase) / p50((*fewest).*phase) : 0);
    };
    counts.row({"most tensors / fewest", "", over(&RoundMeasurement::total), "", over(&RoundMeasurement::sending),
                over(&RoundMeasurement::overhead)});
    countPhases.row({"most tensors / fewest", "", over(&RoundMeasurement::untilPlan),
                     over(&RoundMeasurement::afterSend), over(&RoundMeasurement::caller),
                     over(&RoundMeasurement::apply)});
    report.section("count_sweep", "Round overhead by number of tensors (milliseconds)",
                   "The manifests hold the same bytes in different numbers of tensors and ran side by side, taking "
                   "turns. After the first round a manifest is referred to by its digest, so no control message grows "
                   "with the count; work per tensor still may.",
                   counts);
    report.section("count_phases", "Where the time goes, by number of tensors (milliseconds, p50)", "", countPhases);
  }
}

}  // namespace wsync::bench
