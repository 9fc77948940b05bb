// `wsync-bench round`: the measurements and their report.
#include <iostream>
#include <optional>

#include <wsync/coordinator/coordinator_options.hpp>

#include "round.hpp"

namespace wsync::bench {
namespace {

std::string ms(double microseconds) { return fixed(microseconds / 1000, microseconds < 10'000 ? 3 : 1); }
std::string us(double value) { return fixed(value, value < 100 ? 1 : 0); }
std::string size(std::uint64_t bytes) {
  return bytes < (1U << 20) ? fixed(static_cast<double>(bytes) / 1024, 1) + " KiB"
                            : fixed(static_cast<double>(bytes) / (1 << 20), 2) + " MiB";
}
std::string quoted(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "`" : ", `") + item + "`";
  return out;
}

double inRawRoundTrips(const RoundMeasurement& m, double rawUs) { return rawUs > 0 ? m.overhead.p50 / rawUs : 0; }
bool goalMet(const RoundMeasurement& m) { return m.overhead.p50 / 1000 <= kMaxRoundOverheadMs; }
double monitorRatio(const RoundMeasurement& m) { return m.total.p50 > 0 ? m.withMonitors.p50 / m.total.p50 : 0; }

// The measurement of the most tensors over that of the fewest (the sweep keeps the bytes equal), p50 over p50.
struct CountRatio {
  const RoundMeasurement* fewest = nullptr;
  const RoundMeasurement* most = nullptr;
  double of(Summary RoundMeasurement::*metric) const {
    return (fewest->*metric).p50 > 0 ? (most->*metric).p50 / (fewest->*metric).p50 : 0;
  }
};

std::optional<CountRatio> countRatio(const std::vector<RoundMeasurement>& sweep) {
  if (sweep.size() < 2) return std::nullopt;
  CountRatio counts{&sweep.front(), &sweep.front()};
  for (const RoundMeasurement& m : sweep) {
    if (m.tensors < counts.fewest->tensors) counts.fewest = &m;
    if (m.tensors > counts.most->tensors) counts.most = &m;
  }
  return counts.fewest == counts.most ? std::nullopt : std::optional(counts);
}

Json toJson(const RoundMeasurement& m, double rawUs) {
  Json json{{"workers", m.workers},
            {"model", m.model},
            {"tensors", m.tensors},
            {"bytes", m.bytes},
            {"buckets", m.buckets},
            {"warmup_rounds", m.warmup},
            {"join_ms", m.joinMs},
            {"first_round_ms", m.firstRoundMs},
            {"receive_tail", {{"bytes", m.tail.bytes}, {"median_us", m.tail.medianUs}}},
            {"others_cpu_share", m.othersCpuShare},
            {"overhead_in_raw_rtts", inRawRoundTrips(m, rawUs)},
            {"total", toJson(m.total, "us")},
            {"sending", toJson(m.sending, "us")},
            {"overhead", toJson(m.overhead, "us")},
            {"until_plan", toJson(m.untilPlan, "us")},
            {"after_send", toJson(m.afterSend, "us")},
            {"caller", toJson(m.caller, "us")},
            {"apply", toJson(m.apply, "us")}};
  if (m.withMonitors.samples > 0) {
    json["with_monitors"] = {{"total", toJson(m.withMonitors, "us")}, {"p50_ratio", monitorRatio(m)},
                             {"goal_met", monitorRatio(m) <= kMaxMonitorSlowdown}};
  }
  return json;
}

}  // namespace

void runRoundBenchmark(const RoundBenchConfig& c, Report& report) {
  const RoundResults r = measureRounds(c, std::cerr);
  const double rawUs = r.rawRoundTripUs();
  std::vector<const RoundMeasurement*> goals;
  for (const RoundMeasurement& m : r.workerSweep) {
    if (m.workers == kRoundGoalWorkers) goals.push_back(&m);
  }
  const std::optional<CountRatio> counts = countRatio(r.countSweep);

  report.json["parameters"].update(Json{{"models", c.models}, {"count_models", c.countModels},
                                        {"warmup_rounds", c.warmup}, {"rounds", c.rounds},
                                        {"count_rounds", c.countRounds}, {"count_block", kCountBlock},
                                        {"count_workers", c.countWorkers}, {"bucket_kib", c.bucketKiB},
                                        {"buffers", coordinator::kDefaultBufferCount},
                                        {"baseline_round_trips", c.baselineRoundTrips}, {"pause_mode", "keep"},
                                        {"monitors", c.monitors}});
  report.json["baseline"] = {
      {"before", toJson(r.baselineBefore)}, {"after", toJson(r.baselineAfter)}, {"raw_p50_us", rawUs}};
  for (const auto& [key, sweep] :
       {std::pair{"worker_sweep", &r.workerSweep}, std::pair{"count_sweep", &r.countSweep}}) {
    Json& list = report.json[key] = Json::array();
    for (const RoundMeasurement& m : *sweep) list.push_back(toJson(m, rawUs));
  }
  Json& goal = report.json["goal"] = {{"workers", kRoundGoalWorkers}, {"max_overhead_ms", kMaxRoundOverheadMs}};
  goal["results"] = Json::array();
  for (const RoundMeasurement* m : goals) {
    goal["results"].push_back({{"model", m->model}, {"overhead_p50_ms", m->overhead.p50 / 1000}, {"met", goalMet(*m)}});
  }
  if (counts) {
    report.json["count_ratio"] = {{"fewest_tensors", counts->fewest->tensors}, {"most_tensors", counts->most->tensors},
                                  {"overhead", counts->of(&RoundMeasurement::overhead)},
                                  {"until_plan", counts->of(&RoundMeasurement::untilPlan)},
                                  {"after_send", counts->of(&RoundMeasurement::afterSend)},
                                  {"sending", counts->of(&RoundMeasurement::sending)},
                                  {"apply", counts->of(&RoundMeasurement::apply)}};
  }
  report.json["others_cpu_share"] = r.othersCpuShare;

  std::ostringstream& out = report.markdown;
  out << "## Parameters\n\n"
      << "- Bus: a `Coordinator` in this process on a thread of its own, default options but the bucket size, "
      << c.bucketKiB << " KiB x " << coordinator::kDefaultBufferCount << " buffers; ipc:// endpoints (e.g. bus `"
      << r.busExample << "`); a fresh bus for every measurement\n"
      << "- Workers: processes of their own (`agent-round-worker`), each a `WorkerAgent` bound to the manifest, in "
         "front of an idle engine; trainer: a `TrainerAgent` in this process, pause mode `keep`, each version "
         "published once every worker applied the previous one\n"
      << "- Worker sweep: " << c.warmup << " warm-up + " << c.rounds << " measured rounds per manifest ("
      << quoted(c.models) << ") and worker count (N =";
  for (std::size_t i = 0; i < c.workerCounts.size(); ++i) out << (i == 0 ? " " : ", ") << c.workerCounts[i];
  out << ")";
  if (c.monitors > 0) {
    out << ", then " << c.rounds << " with " << c.monitors << " `wsync-mon` processes attached (live view into "
        << "/dev/null) and " << c.rounds << " without again; the figures without pool both phases";
  }
  out << "\n";
  if (!c.countModels.empty()) {
    out << "- Tensor-count sweep: " << c.countWorkers << " workers per manifest (" << quoted(c.countModels)
        << "), every manifest on its own bus at the same time; " << c.warmup << " warm-up + " << c.countRounds
        << " measured rounds each, taking turns in blocks of " << kCountBlock << "\n";
  }
  out << "- Baseline: " << c.baselineRoundTrips << " request/reply round trips per path, before and after\n\n";

  Table baseline("lrrrr", {"", "raw ZeroMQ p50", "raw p90", "bus p50", "bus p90"});
  for (const auto& [when, b] : {std::pair{"before the rounds", &r.baselineBefore},
                                std::pair{"after the rounds", &r.baselineAfter}}) {
    baseline.row({when, us(b->raw.p50), us(b->raw.p90), us(b->bus.p50), us(b->bus.p90)});
  }
  out << "## Baseline: request/reply round trip (microseconds)\n\n"
      << "`wsync-bench bus`'s round trip between one agent process and this one: raw cppzmq DEALER/ROUTER frames, and "
         "the same exchange through the bus library.\n\n"
      << baseline << "Overheads below are divided by the mean raw p50, " << us(rawUs)
      << " us: \"in raw RTTs\" says how many raw round trips the control of a round costs.\n\n";

  if (!r.workerSweep.empty()) {
    Table sweep("lrrrrrrrl", {"manifest", "workers", "round p50", "round p90", "send p50", "overhead p50",
                              "overhead p90", "in raw RTTs",
                              "goal (p50 <= " + fixed(kMaxRoundOverheadMs, 0) + " ms at " +
                                  std::to_string(kRoundGoalWorkers) + ")"});
    Table phases("lrrrrrrrr", {"manifest", "workers", "begin -> plan", "send returned -> commit",
                               "one receiver's copy of the last buckets (reference)", "publish -> outcome, caller",
                               "commit -> all applied", "first round", "others' CPU use"});
    for (const RoundMeasurement& m : r.workerSweep) {
      sweep.row({"`" + m.model + "` (" + size(m.bytes) + ")", std::to_string(m.workers), ms(m.total.p50),
                 ms(m.total.p90), ms(m.sending.p50), ms(m.overhead.p50), ms(m.overhead.p90),
                 fixed(inRawRoundTrips(m, rawUs), 1), m.workers == kRoundGoalWorkers ? verdict(goalMet(m)) : ""});
      phases.row({"`" + m.model + "`", std::to_string(m.workers), ms(m.untilPlan.p50), ms(m.afterSend.p50),
                  ms(m.tail.medianUs) + " (" + size(m.tail.bytes) + ")", ms(m.caller.p50), ms(m.apply.p50),
                  fixed(m.firstRoundMs, 1), percent(m.othersCpuShare)});
    }
    out << "## Round overhead by number of workers (milliseconds)\n\n"
        << "Round = `PublishOutcome::total`, from the BeginUpdate sent until the trainer handles the Commit. Send = "
           "`PublishOutcome::sending`, the trainer's send of every bucket: the data time. Overhead = round - send, "
           "round by round.\n\n"
        << sweep;
    for (const RoundMeasurement* m : goals) {
      out << "Goal, round overhead p50 at most " << fixed(kMaxRoundOverheadMs, 0) << " ms with " << kRoundGoalWorkers
          << " workers, `" << m->model << "`: " << verdict(goalMet(*m)) << " (" << ms(m->overhead.p50) << " ms, "
          << fixed(inRawRoundTrips(*m, rawUs), 1) << " raw round trips"
          << (m->bytes < (1U << 20) ? "; no data to speak of, so this is the control alone" : "; an upper bound")
          << ").\n\n";
    }
    out << "Where it goes (p50 of each phase on its own, so they need not add up):\n\n" << phases;
  }

  if (c.monitors > 0) {
    Table monitors("lrrrrrrrrrl", {"manifest", "workers", "rounds without", "p50", "p90", "p99", "rounds with",
                                   "p50", "p90", "p99",
                                   "with/without p50 (goal <= " + ratio(kMaxMonitorSlowdown) + ")"});
    for (const RoundMeasurement& m : r.workerSweep) {
      monitors.row({"`" + m.model + "`", std::to_string(m.workers), std::to_string(m.total.samples), ms(m.total.p50),
                    ms(m.total.p90), ms(m.total.p99), std::to_string(m.withMonitors.samples), ms(m.withMonitors.p50),
                    ms(m.withMonitors.p90), ms(m.withMonitors.p99),
                    ratio(monitorRatio(m)) + " " + verdict(monitorRatio(m) <= kMaxMonitorSlowdown)});
    }
    out << "## Round time with and without " << c.monitors << " monitors attached (milliseconds)\n\n"
        << "Round: BeginUpdate sent until the trainer handled the Commit. The goal: under 2% apart.\n\n"
        << monitors;
  }

  if (!r.countSweep.empty()) {
    Table sweep("lrrrrrrrrrr", {"manifest", "tensors", "buckets", "round p50", "send p50", "overhead p50",
                                "overhead p90", "begin -> plan", "send returned -> commit", "commit -> all applied",
                                "first round"});
    for (const RoundMeasurement& m : r.countSweep) {
      sweep.row({"`" + m.model + "`", std::to_string(m.tensors), std::to_string(m.buckets), ms(m.total.p50),
                 ms(m.sending.p50), ms(m.overhead.p50), ms(m.overhead.p90), ms(m.untilPlan.p50), ms(m.afterSend.p50),
                 ms(m.apply.p50), fixed(m.firstRoundMs, 1)});
    }
    out << "## Round overhead by number of tensors (milliseconds)\n\n"
        << c.countWorkers << " workers; the manifests hold the same bytes in different numbers of tensors and ran side "
        << "by side, taking turns. After the first round a manifest is referred to by its digest, so no control "
           "message grows with the count; work the agents do per tensor still may.\n\n"
        << sweep;
    if (counts) {
      out << "From " << counts->fewest->tensors << " to " << counts->most->tensors
          << " tensors, p50 over p50: overhead " << ratio(counts->of(&RoundMeasurement::overhead))
          << ", begin -> plan " << ratio(counts->of(&RoundMeasurement::untilPlan)) << ", send returned -> commit "
          << ratio(counts->of(&RoundMeasurement::afterSend)) << ", send "
          << ratio(counts->of(&RoundMeasurement::sending)) << ", commit -> all applied "
          << ratio(counts->of(&RoundMeasurement::apply)) << ".\n\n";
    }
  }
}

}  // namespace wsync::bench
