// `wsync-bench soak`: the verdicts and the report.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>

#include <wsync/coordinator/coordinator_options.hpp>

#include "soak.hpp"

namespace wsync::bench {
namespace {

Cell ms(double us) { return {us / 1000, fixed(us / 1000, us < 100'000 ? 2 : 1)}; }
Cell figure(double value) {
  return {value, value == std::floor(value) ? fixed(value, 0) : fixed(value, value < 100 ? 2 : 1)};
}

// A figure read from every sample; the flatness check compares its maxima over the first and the last window.
struct Resource {
  std::string name;
  std::function<double(const SoakSample&)> value;
  enum class Slack : std::uint8_t { Memory, Fds, None } slack;
  bool inWindows = false;  // a column of the windows table (the JSON samples have every figure)
};

std::vector<Resource> resources() {
  using S = Resource::Slack;
  std::vector<Resource> list;
  for (const auto& [who, usage] :
       {std::pair{"coordinator", &SoakSample::coordinator}, std::pair{"trainer (this process)", &SoakSample::trainer},
        std::pair{"worker-0 (resident)", &SoakSample::resident}}) {
    const std::string name = who;
    list.push_back({name + " RSS (MiB)", [u = usage](auto& s) { return mib((s.*u).rssBytes); }, S::Memory, true});
    list.push_back({name + " RssAnon (MiB)", [u = usage](auto& s) { return mib((s.*u).anonBytes); }, S::Memory});
    list.push_back({name + " open fds", [u = usage](auto& s) { return (s.*u).fds; }, S::Fds});
    list.push_back({name + " threads", [u = usage](auto& s) { return (s.*u).threads; }, S::None});
  }
  list.push_back({"largest worker RSS (MiB)", [](auto& s) { return mib(s.workersMaxRss); }, S::Memory, true});
  list.push_back({"most fds of a worker", [](auto& s) { return s.workersMaxFds; }, S::Fds});
  list.push_back({"/dev/shm segments of the bus", [](auto& s) { return s.shmSegments; }, S::None, true});
  list.push_back({"runtime files of the bus", [](auto& s) { return s.runtimeFiles; }, S::None});
  list.push_back({"child processes", [](auto& s) { return s.children; }, S::None, true});
  list.push_back({"zombie children", [](auto& s) { return s.zombies; }, S::None});
  list.push_back({"dead slots", [](auto& s) { return s.deadSlots; }, S::None, true});
  return list;
}

}  // namespace

// Samples and restarts as JSON (nlohmann_json finds these by ADL: outside the anonymous namespace).
void to_json(Json& json, const ProcessUsage& u) {
  json = {{"alive", u.alive},          {"rss", u.rssBytes}, {"rss_anon", u.anonBytes},
          {"rss_shmem", u.shmemBytes}, {"fds", u.fds},      {"threads", u.threads}};
}

void to_json(Json& json, const SoakSample& s) {
  json = {{"round", s.round},
          {"seconds", s.seconds},
          {"coordinator", s.coordinator},
          {"trainer", s.trainer},
          {"resident_worker", s.resident},
          {"workers_max_rss", s.workersMaxRss},
          {"workers_sum_rss", s.workersSumRss},
          {"workers_max_fds", s.workersMaxFds},
          {"live_workers", s.liveWorkers},
          {"shm_segments", s.shmSegments},
          {"runtime_files", s.runtimeFiles},
          {"children", s.children},
          {"zombies", s.zombies},
          {"active_slots", s.activeSlots},
          {"dead_slots", s.deadSlots}};
}

void to_json(Json& json, const SoakRestart& s) {
  json = {{"round", s.round + 1}, {"worker", s.worker},    {"mid_round", s.midRound},
          {"phase", s.phase},     {"delay_us", s.delayUs}, {"rejoin_ms", s.rejoinMs}};
}

void runSoakBenchmark(const SoakBenchConfig& c, Report& report) {
  const SoakResults r = measureSoak(c, std::cerr);
  report.parameters().update(
      Json{{"rounds", c.rounds},
           {"workers", c.workers},
           {"window", c.window},
           {"restart_every", c.restartEvery},
           {"seed", c.seed},
           {"model", c.model},
           {"tensors", r.tensors},
           {"bytes", r.bytes},
           {"pause_mode", c.pauseMode},
           {"worker_step_ms", c.workerStepMs},
           {"sample_every", r.sampleEvery},
           {"bus", r.busName},
           {"coordinator", r.coordinatorPath + " --log-level " + c.childLogLevel + " (shm buckets " +
                               std::to_string(coordinator::kDefaultBucketBytes >> 20) + " MiB x " +
                               std::to_string(coordinator::kDefaultBufferCount) + ")"},
           {"worker", r.workerPath + " --channel shm"},
           {"startup_ms", r.startupMs},
           {"first_round_ms", r.firstRoundMs},
           {"others_cpu_share", r.othersCpuShare}});

  // The maximum of a figure over a window's samples, for every window.
  const auto maxima = [&r](const std::function<double(const SoakSample&)>& value) {
    std::vector<double> max(r.windows.size(), 0);
    for (const SoakSample& s : r.samples) max[s.window] = std::max(max[s.window], value(s));
    return max;
  };
  const SoakWindow& w1 = r.windows[1];  // the first after the warm-up
  const SoakWindow& wn = r.windows.back();
  Table flatness({{"figure", "figure"},
                  {"first", "first window"},
                  {"last", "last window"},
                  {"ratio", "last/first"},
                  {"goal", "goal"},
                  {"met", "verdict"}});
  std::string missed;
  const auto check = [&](const std::string& name, double a, double b, const std::string& goal, bool met, bool better) {
    flatness.row({name, figure(a), figure(b), a > 0 ? ratio(b / a) : Cell("-"), goal,
                  Cell(met, verdict(met).text + (better ? " (better)" : ""))});
    if (!met) missed += (missed.empty() ? "" : ", ") + name;
  };
  // Throughput and latency: within the tolerance either way; a miss on the good side says the machine changed.
  const auto steady = [&](const std::string& name, double a, double b, bool higherIsBetter) {
    const bool met = a > 0 && std::abs(b / a - 1) <= kSoakFlatTolerance;
    check(name, a, b, "within +-" + fixed(kSoakFlatTolerance * 100, 0) + "%", met,
          !met && a > 0 && (b > a) == higherIsBetter);
  };
  steady("rounds/s", w1.roundsPerSecond(), wn.roundsPerSecond(), true);
  steady("round time p50 (ms)", w1.roundTime.p50 / 1000, wn.roundTime.p50 / 1000, false);
  steady("round time p99 (ms)", w1.roundTime.p99 / 1000, wn.roundTime.p99 / 1000, false);
  for (const Resource& resource : resources()) {
    if (resource.name == "dead slots") continue;  // slots of killed workers, kept for monitors: they do pile up
    const std::vector<double> max = maxima(resource.value);
    const double a = max[1];
    const double b = max.back();
    const double slack = resource.slack == Resource::Slack::Memory
                             ? std::max(kSoakRssToleranceShare * a, kSoakRssToleranceMiB)
                             : (resource.slack == Resource::Slack::Fds ? kSoakFdTolerance : 0);
    const std::string goal = resource.slack == Resource::Slack::Memory
                                 ? "<= first max + max(" + fixed(kSoakRssToleranceShare * 100, 0) + "%, " +
                                       fixed(kSoakRssToleranceMiB, 0) + " MiB) = " + fixed(a + slack, 2)
                                 : "<= first max + " + fixed(slack, 0);
    check(resource.name, a, b, goal, b <= a + slack, false);
  }
  report.json["flat"] = missed.empty();
  report.section("flatness", "Flatness: the last window against the first after the warm-up",
                 "The baseline is the run's own beginning, window 2; it and the last window run without restarts, so "
                 "the ratio compares like with like. Resources: the window's maximum over its samples (RssAnon, the "
                 "heap and stacks, is where a leak shows first). Other processes took " +
                     percent(w1.othersCpuShare).text + " of the CPUs in the first window and " +
                     percent(wn.othersCpuShare).text + " in the last" +
                     (std::abs(w1.othersCpuShare - wn.othersCpuShare) > kSoakOthersShiftWarning
                          ? ": the rounds/s and round-time ratios measure that change too"
                          : "") +
                     ". Goal, flat: **" + (missed.empty() ? "met" : "missed") + "**" +
                     (missed.empty() ? "" : " (" + missed + ")") + ".",
                 flatness);

  Table health({{"figure", "figure"}, {"value", "value"}, {"goal", "goal"}, {"met", "verdict"}});
  for (const auto& [name, value] :
       {std::pair{"aborted rounds not caused by a restart", r.unexpectedAborts}, std::pair{"refused rounds", r.refused},
        std::pair{"workers that ended by themselves", r.unexpectedExits},
        std::pair{"/dev/shm segments of the bus after the coordinator stopped",
                  std::size_t{r.residueAfterStop.first}}}) {
    health.row({name, value, "0", verdict(value == 0)});
  }
  health.row({"wsync-coordinator's exit on SIGTERM", r.coordinatorExit, "exited with status 0",
              verdict(r.coordinatorExit == "exited with status 0")});
  report.section("health", "Health of the run", "", health);

  Table pooled({{"windows", ""},
                {"count", "windows"},
                {"committed", "committed rounds"},
                {"rounds_per_second", "rounds/s"},
                {"p50_ms", "p50 ms"},
                {"p99_ms", "p99 ms"},
                {"max_ms", "max ms"},
                {"aborted", "aborted"}});
  double rates[2] = {0, 0};
  for (const bool restarts : {false, true}) {
    std::size_t windows = 0, rounds = 0, aborted = 0;
    double seconds = 0;
    for (const SoakWindow& w : r.windows) {
      if (w.warmup || w.withRestarts != restarts) continue;
      ++windows;
      rounds += w.rounds;
      seconds += w.seconds;
      aborted += w.abortedByRestart + w.abortedOther;
    }
    const Summary& times = restarts ? r.withRestarts : r.withoutRestarts;
    rates[restarts] = seconds > 0 ? static_cast<double>(rounds) / seconds : 0;
    pooled.row({restarts ? "with restarts" : "without restarts", windows, times.samples, number(rates[restarts], 0),
                ms(times.p50), ms(times.p99), ms(times.max), aborted});
  }
  const auto over = [](double with, double without) { return without > 0 ? ratio(with / without) : Cell("-"); };
  pooled.row({"with / without", "", "", over(rates[1], rates[0]), over(r.withRestarts.p50, r.withoutRestarts.p50),
              over(r.withRestarts.p99, r.withoutRestarts.p99), over(r.withRestarts.max, r.withoutRestarts.max)});
  if (r.withRestarts.samples > 0) {
    report.section("pooled", "Rounds with restarts against without (same run)",
                   "Committed rounds pooled over the windows without restarts (2 and the last) and over those with "
                   "them. Rounds/s counts every round, aborted ones too, and the time restarts and samples took.",
                   pooled);
  }

  const auto midRound = std::ranges::count(r.restarts, true, &SoakRestart::midRound);
  std::size_t abortedByRestart = 0, shortRounds = 0;
  for (const SoakWindow& w : r.windows) {
    abortedByRestart += w.abortedByRestart;
    shortRounds += w.roundsShortOfWorkers;
  }
  report.json["restarts"] = r.restarts;
  report.json.update(Json{{"aborts_by_reason", r.abortsByReason},
                          {"kill_phases", r.killPhases},
                          {"aborted_round_time", toJson(r.abortedRoundTime, "us", {"p50", "max"})},
                          {"rejoin", toJson(r.rejoin, "us", {"p50", "p99", "max"})},
                          {"details", r.details}});
  std::ostringstream& out = report.markdown;
  out << "## Restarts\n\n- " << r.restarts.size() << " restarts, " << midRound << " of them while the trainer waited "
      << "for the round's outcome; the coordinator's round phase at the kill:";
  for (const auto& [phase, count] : r.killPhases) out << " " << phase << " " << count << ";";
  out << "\n- Aborted rounds: " << abortedByRestart + r.unexpectedAborts << ", " << abortedByRestart
      << " naming a killed worker (expected); by reason:";
  for (const auto& [reason, count] : r.abortsByReason) out << " " << reason << " " << count << ";";
  out << " BeginUpdate to the trainer's Abort p50 " << ms(r.abortedRoundTime.p50).text << " ms, max "
      << ms(r.abortedRoundTime.max).text << " ms\n- Rejoin, a (re)started worker's process start until it held an "
      << "attached slot: p50 " << ms(r.rejoin.p50).text << " ms, max " << ms(r.rejoin.max).text << " ms over "
      << r.rejoin.samples << "\n- Rounds published while fewer than all workers were registered: " << shortRounds
      << "\n";
  for (const std::string& detail : r.details) out << "- " << detail << "\n";
  out << "\n";

  std::vector<Table::Column> columns{{"window", "window"},
                                     {"rounds", "rounds"},
                                     {"restarts", "restarts (mid-round)"},
                                     {"aborted", "aborted (by a restart)"},
                                     {"rounds_per_second", "rounds/s"},
                                     {"p50_ms", "p50 ms"},
                                     {"p99_ms", "p99 ms"},
                                     {"max_ms", "max ms"}};
  std::vector<std::vector<double>> resourceMaxima;
  for (const Resource& resource : resources()) {
    if (!resource.inWindows) continue;
    columns.push_back({resource.name, resource.name});
    resourceMaxima.push_back(maxima(resource.value));
  }
  columns.push_back({"others_cpu_share", "others' CPU"});
  Table windows(columns);
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    const SoakWindow& w = r.windows[i];
    std::vector<Cell> row{
        std::to_string(i + 1) + (w.warmup         ? " (warm-up)"
                                 : w.withRestarts ? ""
                                                  : " (no restarts)"),
        w.rounds,
        Cell(Json{{"all", w.restarts}, {"mid_round", w.restartsMidRound}},
             std::to_string(w.restarts) + " (" + std::to_string(w.restartsMidRound) + ")"),
        Cell(Json{{"all", w.abortedByRestart + w.abortedOther}, {"by_restart", w.abortedByRestart}},
             std::to_string(w.abortedByRestart + w.abortedOther) + " (" + std::to_string(w.abortedByRestart) + ")"),
        number(w.roundsPerSecond(), 0),
        ms(w.roundTime.p50),
        ms(w.roundTime.p99),
        ms(w.roundTime.max)};
    for (const std::vector<double>& max : resourceMaxima) row.push_back(figure(max[i]));
    row.push_back(percent(w.othersCpuShare));
    windows.row(std::move(row));
  }
  report.section("windows", "Windows", "Rounds: committed ones. Resources: the window's maximum.", windows);

  report.json["samples"] = r.samples;
  report.json["after_stop"] = {{"coordinator_exit", r.coordinatorExit},
                               {"shm_segments", r.residueAfterStop.first},
                               {"runtime_files", r.residueAfterStop.second}};
  out << "After the run: the trainer said goodbye, the workers got SIGTERM together, then `wsync-coordinator` "
      << r.coordinatorExit << "; left of the bus: " << r.residueAfterStop.first << " /dev/shm segments, "
      << r.residueAfterStop.second << " runtime files.\n\n";
}

}  // namespace wsync::bench
