#include "round_report.hpp"

#include <cmath>
#include <optional>
#include <sstream>
#include <vector>

#include <wsync/coordinator/coordinator_options.hpp>

#include "report_format.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string ms(double microseconds) { return fixed(microseconds / 1000, microseconds < 10'000 ? 3 : 1); }
std::string us(double value) { return fixed(value, value < 100 ? 1 : 0); }
std::string size(std::uint64_t bytes) {
  return bytes < (1u << 20) ? fixed(static_cast<double>(bytes) / 1024, 1) + " KiB"
                            : fixed(static_cast<double>(bytes) / kMiB, 2) + " MiB";
}
std::string percent(double share) { return std::to_string(static_cast<int>(std::lround(share * 100))) + "%"; }

double inRawRoundTrips(const RoundMeasurement& m, double rawUs) { return rawUs > 0 ? m.overhead.p50Us / rawUs : 0; }

bool goalMet(const RoundMeasurement& m) { return m.overhead.p50Us / 1000 <= kMaxRoundOverheadMs; }

std::vector<const RoundMeasurement*> goalMeasurements(const RoundResults& results) {
  std::vector<const RoundMeasurement*> goals;
  for (const RoundMeasurement& m : results.workerSweep) {
    if (m.workers == kRoundGoalWorkers) goals.push_back(&m);
  }
  return goals;
}

std::string quotedList(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "`" : ", `") + item + "`";
  return out;
}

// The measurement of the most tensors over that of the fewest (the sweep keeps the bytes equal).
struct CountRatio {
  const RoundMeasurement* fewest = nullptr;
  const RoundMeasurement* most = nullptr;
  double of(LatencySummary RoundMeasurement::*metric) const {
    const double base = (fewest->*metric).p50Us;
    return base > 0 ? (most->*metric).p50Us / base : 0;
  }
};

std::optional<CountRatio> countRatio(const RoundResults& results) {
  if (results.countSweep.size() < 2) return std::nullopt;
  CountRatio counts{&results.countSweep.front(), &results.countSweep.front()};
  for (const RoundMeasurement& m : results.countSweep) {
    if (m.tensors < counts.fewest->tensors) counts.fewest = &m;
    if (m.tensors > counts.most->tensors) counts.most = &m;
  }
  if (counts.fewest == counts.most) return std::nullopt;
  return counts;
}

void parameterSection(std::ostringstream& out, const RoundBenchReport& report) {
  const RoundBenchConfig& c = report.config;
  out << "## Parameters\n\n"
      << "- Mode: " << (c.quick ? "`--quick` (a demonstration; too few rounds for conclusions)" : "full") << "\n"
      << "- Bus: a `Coordinator` in this process on a thread of its own (`Coordinator::run`), default options but "
         "the bucket size, "
      << c.bucketKiB << " KiB x " << coordinator::kDefaultBufferCount
      << " buffers; ipc:// endpoints in the runtime folder (e.g. bus `" << report.results.busExample
      << "`); a fresh bus for every measurement\n"
      << "- Workers: separate processes (`wsync-bench agent-round-worker`), each a `WorkerAgent` with bindings for "
         "the manifest and pause hooks that return at once (an idle engine)\n"
      << "- Trainer: a `TrainerAgent` in this process, pause mode `keep`; each version is published as soon as "
         "every worker has applied the previous one\n"
      << "- Worker sweep: " << c.warmup << " warm-up + " << c.rounds << " measured rounds per manifest ("
      << quotedList(c.models) << ") and worker count (N =";
  for (std::size_t i = 0; i < c.workerCounts.size(); ++i) out << (i == 0 ? " " : ", ") << c.workerCounts[i];
  out << ")\n";
  if (!c.countModels.empty()) {
    out << "- Tensor-count sweep: " << c.countWorkers << " workers per manifest (" << quotedList(c.countModels)
        << "), every manifest on its own bus at the same time; " << c.warmup << " warm-up + " << c.countRounds
        << " measured rounds each, taking turns in blocks of " << kCountBlock << "\n";
  }
  out << "- Baseline: " << c.baselineRoundTrips << " request/reply round trips per path (bus, raw), before and "
      << "after the rounds, as in `wsync-bench bus`\n"
      << "- Wall time of the run: " << fixed(report.wallSeconds, 1) << " s\n\n";
}

void baselineSection(std::ostringstream& out, const RoundResults& r) {
  out << "## Baseline: request/reply round trip (microseconds)\n\n"
      << "One agent process and this one over ipc://, `wsync-bench bus`'s round trip: raw cppzmq DEALER/ROUTER "
         "frames, and the same exchange through the bus library.\n\n"
      << "| | raw ZeroMQ p50 | raw p90 | bus p50 | bus p90 |\n|---|---:|---:|---:|---:|\n"
      << "| before the rounds | " << us(r.baselineBefore.raw.p50Us) << " | " << us(r.baselineBefore.raw.p90Us) << " | "
      << us(r.baselineBefore.bus.p50Us) << " | " << us(r.baselineBefore.bus.p90Us) << " |\n"
      << "| after the rounds | " << us(r.baselineAfter.raw.p50Us) << " | " << us(r.baselineAfter.raw.p90Us) << " | "
      << us(r.baselineAfter.bus.p50Us) << " | " << us(r.baselineAfter.bus.p90Us) << " |\n\n"
      << "Overheads below are divided by the mean raw p50, " << us(r.rawRoundTripUs())
      << " us: \"in raw RTTs\" says how many raw round trips the control of a round costs.\n\n";
}

void workerSection(std::ostringstream& out, const RoundBenchReport& report) {
  const RoundResults& r = report.results;
  if (r.workerSweep.empty()) return;
  out << "## Round overhead by number of workers (milliseconds)\n\n"
      << "Round = `PublishOutcome::total`, from the BeginUpdate sent until the trainer handles the Commit. Send = "
         "`PublishOutcome::sending`, the trainer's send of every bucket: the data time. Overhead = round - send, "
         "round by round.\n\n"
      << "| manifest | workers | round p50 | round p90 | send p50 | overhead p50 | overhead p90 | in raw RTTs | goal "
         "(p50 <= "
      << fixed(kMaxRoundOverheadMs, 0) << " ms at " << kRoundGoalWorkers << ") |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const RoundMeasurement& m : r.workerSweep) {
    out << "| `" << m.model << "` (" << size(m.bytes) << ") | " << m.workers << " | " << ms(m.total.p50Us) << " | "
        << ms(m.total.p90Us) << " | " << ms(m.sending.p50Us) << " | " << ms(m.overhead.p50Us) << " | "
        << ms(m.overhead.p90Us) << " | " << fixed(inRawRoundTrips(m, r.rawRoundTripUs()), 1) << " | "
        << (m.workers == kRoundGoalWorkers ? verdict(goalMet(m)) : std::string()) << " |\n";
  }
  out << "\n";
  for (const RoundMeasurement* goal : goalMeasurements(r)) {
    out << "Goal, round overhead p50 at most " << fixed(kMaxRoundOverheadMs, 0) << " ms with " << kRoundGoalWorkers
        << " workers, `" << goal->model << "`: " << verdict(goalMet(*goal)) << " (" << ms(goal->overhead.p50Us)
        << " ms, " << fixed(inRawRoundTrips(*goal, r.rawRoundTripUs()), 1) << " raw round trips"
        << (goal->bytes < (1u << 20) ? "; no data to speak of, so this is the control alone" : "; an upper bound")
        << ").\n\n";
  }
  out << "Where it goes (p50 of each phase on its own, so they need not add up):\n\n"
      << "| manifest | workers | begin -> plan | send returned -> commit | one receiver's copy of the last buckets "
         "(reference) | publish -> outcome, caller | commit -> all applied | first round | others' CPU use |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const RoundMeasurement& m : r.workerSweep) {
    out << "| `" << m.model << "` | " << m.workers << " | " << ms(m.untilPlan.p50Us) << " | "
        << ms(m.afterSend.p50Us) << " | " << ms(m.tail.medianUs) << " (" << size(m.tail.bytes) << ") | "
        << ms(m.caller.p50Us) << " | " << ms(m.apply.p50Us) << " | " << fixed(m.firstRoundMs, 1) << " | "
        << percent(m.othersCpuShare) << " |\n";
  }
  out << "\n";
}

void countSection(std::ostringstream& out, const RoundBenchReport& report) {
  const RoundResults& r = report.results;
  if (r.countSweep.empty()) return;
  out << "## Round overhead by number of tensors (milliseconds)\n\n"
      << report.config.countWorkers << " workers; the manifests hold the same bytes in different numbers of "
      << "tensors and ran side by side, taking turns. After the first round a manifest is referred to by its digest, "
         "so no control message grows with the count; work the agents do per tensor still may.\n\n"
      << "| manifest | tensors | buckets | round p50 | send p50 | overhead p50 | overhead p90 | begin -> plan | send "
         "returned -> commit | commit -> all applied | first round |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const RoundMeasurement& m : r.countSweep) {
    out << "| `" << m.model << "` | " << m.tensors << " | " << m.buckets << " | " << ms(m.total.p50Us) << " | "
        << ms(m.sending.p50Us) << " | " << ms(m.overhead.p50Us) << " | " << ms(m.overhead.p90Us) << " | "
        << ms(m.untilPlan.p50Us) << " | " << ms(m.afterSend.p50Us) << " | " << ms(m.apply.p50Us) << " | "
        << fixed(m.firstRoundMs, 1) << " |\n";
  }
  out << "\n";
  if (const auto counts = countRatio(r)) {
    out << "From " << counts->fewest->tensors << " to " << counts->most->tensors
        << " tensors, p50 over p50: overhead " << ratio(counts->of(&RoundMeasurement::overhead)) << ", begin -> plan "
        << ratio(counts->of(&RoundMeasurement::untilPlan)) << ", send returned -> commit "
        << ratio(counts->of(&RoundMeasurement::afterSend)) << ", send "
        << ratio(counts->of(&RoundMeasurement::sending)) << ", commit -> all applied "
        << ratio(counts->of(&RoundMeasurement::apply)) << ".\n\n";
  }
}

void methodSection(std::ostringstream& out) {
  out << "## Method\n\n"
      << "- Data time is the trainer's send. When it returns, each receiver still has the last buckets of the ring "
         "to copy out (at most one per buffer: the sender refills a buffer only once every receiver has drained it); "
         "round - send counts that tail as overhead, so with data the overhead is an upper bound. Small buckets keep "
         "the tail small; the reference column times one receiver's copy and digest of it in this process, and N "
         "receivers on fewer cores take turns. The `tiny` manifest (4 KiB) has no data time to speak of: its round "
         "time is the control overhead itself.\n"
      << "- Applying a version (each worker copies staging into its weights after the Commit) is data work off the "
         "trainer's path; it is timed on its own, and each round starts once the previous one is applied everywhere, "
         "so that the next Pause does not queue behind it. The coordinator sends TransferPlan and Commit to the "
         "workers before the trainer, though, so where processes outnumber cores the trainer's plan and commit wait "
         "for a core behind the workers' own work (staging set-up, receiving, applying): data work that lands in "
         "round - send.\n"
      << "- Warm-up rounds are not measured; the first round carries the manifest to every worker and faults in "
         "staging, and is shown on its own.\n"
      << "- On a 2-core machine every worker process competes with the coordinator, the trainer and the other "
         "workers for two cores: with 32 workers the figures mostly measure the scheduler, not wsync.\n"
      << "- Percentiles are nearest-rank over the measured rounds. \"Others' CPU use\" is the share of all CPU time "
         "that processes other than the benchmark and its workers used meanwhile.\n";
}

std::string jsonLatency(const LatencySummary& s) {
  std::ostringstream out;
  out << "{\"samples\": " << s.samples << ", \"min_us\": " << fixed(s.minUs, 3) << ", \"p50_us\": "
      << fixed(s.p50Us, 3) << ", \"p90_us\": " << fixed(s.p90Us, 3) << ", \"p99_us\": " << fixed(s.p99Us, 3)
      << ", \"max_us\": " << fixed(s.maxUs, 3) << "}";
  return out.str();
}

std::string jsonComparison(const LatencyComparison& c) {
  return "{\"bus\": " + jsonLatency(c.bus) + ", \"raw\": " + jsonLatency(c.raw) + "}";
}

std::string jsonStrings(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : ", ") + jsonString(items[i]);
  return out + "]";
}

std::string jsonMeasurement(const RoundMeasurement& m, double rawUs) {
  std::ostringstream out;
  out << "{\"workers\": " << m.workers << ", \"model\": " << jsonString(m.model) << ", \"tensors\": " << m.tensors
      << ", \"bytes\": " << m.bytes << ", \"buckets\": " << m.buckets << ", \"warmup_rounds\": " << m.warmup
      << ", \"join_ms\": " << fixed(m.joinMs, 1) << ", \"first_round_ms\": " << fixed(m.firstRoundMs, 3)
      << ", \"receive_tail\": {\"bytes\": " << m.tail.bytes << ", \"median_us\": " << fixed(m.tail.medianUs, 3) << "}"
      << ", \"others_cpu_share\": " << fixed(m.othersCpuShare, 3)
      << ", \"overhead_in_raw_rtts\": " << fixed(inRawRoundTrips(m, rawUs), 3) << ",\n      \"total\": "
      << jsonLatency(m.total) << ",\n      \"sending\": " << jsonLatency(m.sending)
      << ",\n      \"overhead\": " << jsonLatency(m.overhead) << ",\n      \"until_plan\": " << jsonLatency(m.untilPlan)
      << ",\n      \"after_send\": " << jsonLatency(m.afterSend) << ",\n      \"caller\": " << jsonLatency(m.caller)
      << ",\n      \"apply\": " << jsonLatency(m.apply) << "}";
  return out.str();
}

void jsonMeasurements(std::ostringstream& out, const char* name, const std::vector<RoundMeasurement>& list,
                      double rawUs) {
  out << "  \"" << name << "\": [";
  for (std::size_t i = 0; i < list.size(); ++i) {
    out << (i == 0 ? "\n    " : ",\n    ") << jsonMeasurement(list[i], rawUs);
  }
  out << (list.empty() ? "],\n" : "\n  ],\n");
}

}  // namespace

std::string renderRoundMarkdown(const RoundBenchReport& report) {
  std::ostringstream out;
  out << "# wsync-bench round: " << report.machine.dateUtc << "\n\n";
  machineSection(out, report.machine);
  parameterSection(out, report);
  baselineSection(out, report.results);
  workerSection(out, report);
  countSection(out, report);
  methodSection(out);
  return out.str();
}

std::string renderRoundJson(const RoundBenchReport& report) {
  const RoundBenchConfig& c = report.config;
  const RoundResults& r = report.results;
  std::ostringstream out;
  out << "{\n  \"mode\": \"round\",\n"
      << "  \"machine\": " << machineJson(report.machine) << ",\n"
      << "  \"parameters\": {\"quick\": " << jsonBool(c.quick) << ", \"models\": " << jsonStrings(c.models)
      << ", \"count_models\": " << jsonStrings(c.countModels) << ", \"warmup_rounds\": " << c.warmup
      << ", \"rounds\": " << c.rounds << ", \"count_rounds\": " << c.countRounds << ", \"count_block\": " << kCountBlock
      << ", \"count_workers\": " << c.countWorkers << ", \"bucket_kib\": " << c.bucketKiB
      << ", \"buffers\": " << coordinator::kDefaultBufferCount << ", \"baseline_round_trips\": "
      << c.baselineRoundTrips << ", \"pause_mode\": \"keep\"},\n"
      << "  \"baseline\": {\"before\": " << jsonComparison(r.baselineBefore) << ",\n    \"after\": "
      << jsonComparison(r.baselineAfter) << ",\n    \"raw_p50_us\": " << fixed(r.rawRoundTripUs(), 3) << "},\n";
  jsonMeasurements(out, "worker_sweep", r.workerSweep, r.rawRoundTripUs());
  jsonMeasurements(out, "count_sweep", r.countSweep, r.rawRoundTripUs());
  out << "  \"goal\": {\"workers\": " << kRoundGoalWorkers << ", \"max_overhead_ms\": " << fixed(kMaxRoundOverheadMs, 3)
      << ", \"results\": [";
  const auto goals = goalMeasurements(r);
  for (std::size_t i = 0; i < goals.size(); ++i) {
    out << (i == 0 ? "" : ", ") << "{\"model\": " << jsonString(goals[i]->model)
        << ", \"overhead_p50_ms\": " << fixed(goals[i]->overhead.p50Us / 1000, 3)
        << ", \"met\": " << jsonBool(goalMet(*goals[i])) << "}";
  }
  out << "]},\n";
  if (const auto counts = countRatio(r)) {
    out << "  \"count_ratio\": {\"fewest_tensors\": " << counts->fewest->tensors << ", \"most_tensors\": "
        << counts->most->tensors << ", \"overhead\": " << fixed(counts->of(&RoundMeasurement::overhead), 3)
        << ", \"until_plan\": " << fixed(counts->of(&RoundMeasurement::untilPlan), 3)
        << ", \"after_send\": " << fixed(counts->of(&RoundMeasurement::afterSend), 3)
        << ", \"sending\": " << fixed(counts->of(&RoundMeasurement::sending), 3)
        << ", \"apply\": " << fixed(counts->of(&RoundMeasurement::apply), 3) << "},\n";
  }
  out << "  \"others_cpu_share\": " << fixed(r.othersCpuShare, 3) << ",\n"
      << "  \"wall_seconds\": " << fixed(report.wallSeconds, 2) << "\n}\n";
  return out.str();
}

}  // namespace wsync::bench
