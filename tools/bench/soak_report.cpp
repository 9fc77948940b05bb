// `wsync-bench soak`: the verdicts (is the last window like the first after the warm-up, both without restarts?) and
// the report.
#include <cmath>
#include <functional>
#include <iostream>

#include <wsync/coordinator/coordinator_options.hpp>

#include "soak.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string ms(double microseconds) { return fixed(microseconds / 1000, microseconds < 100'000 ? 2 : 1); }
std::string mib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / kMiB, 1); }
Cell figure(double value) {
  return {value, value == std::floor(value) ? std::to_string(static_cast<long long>(value))
                                            : fixed(value, value < 100 ? 2 : 1)};
}

// The largest value of a figure over the samples of one window.
double windowMax(const SoakResults& r, std::size_t window, const std::function<double(const SoakSample&)>& value) {
  double max = 0;
  for (const SoakSample& sample : r.samples) {
    if (sample.window == window) max = std::max(max, value(sample));
  }
  return max;
}

Json toJson(const ProcessUsage& u) {
  return {{"alive", u.alive}, {"rss", u.rssBytes}, {"rss_anon", u.anonBytes}, {"rss_shmem", u.shmemBytes},
          {"fds", u.fds},     {"threads", u.threads}};
}

Json roundTimes(const Summary& s) { return toJson(s, "us", {"p50", "p90", "p99", "max"}); }

// The resources of the flatness check and of the windows table, each read from a sample.
struct Resource {
  std::string figure;
  std::function<double(const SoakSample&)> value;
  enum class Tolerance : std::uint8_t { Memory, Fds, None } tolerance;
};

std::vector<Resource> resources() {
  std::vector<Resource> list;
  const std::pair<std::string, ProcessUsage SoakSample::*> processes[] = {
      {"coordinator", &SoakSample::coordinator},
      {"trainer (this process)", &SoakSample::trainer},
      {"worker-0 (resident)", &SoakSample::resident}};
  using T = Resource::Tolerance;
  for (const auto& [who, usage] : processes) {
    list.push_back({who + " RSS (MiB)", [usage](const SoakSample& s) { return static_cast<double>((s.*usage).rssBytes) / kMiB; }, T::Memory});
    list.push_back({who + " RssAnon (MiB)", [usage](const SoakSample& s) { return static_cast<double>((s.*usage).anonBytes) / kMiB; },
                    T::Memory});
    list.push_back({who + " open fds", [usage](const SoakSample& s) { return (s.*usage).fds; }, T::Fds});
    list.push_back({who + " threads", [usage](const SoakSample& s) { return (s.*usage).threads; }, T::None});
  }
  list.push_back({"largest worker RSS (MiB)", [](const SoakSample& s) { return static_cast<double>(s.workersMaxRss) / kMiB; }, T::Memory});
  list.push_back({"most fds of a worker", [](const SoakSample& s) { return s.workersMaxFds; }, T::Fds});
  list.push_back({"/dev/shm segments of the bus", [](const SoakSample& s) { return s.shmSegments; }, T::None});
  list.push_back({"runtime files of the bus", [](const SoakSample& s) { return s.runtimeFiles; }, T::None});
  list.push_back({"child processes", [](const SoakSample& s) { return s.children; }, T::None});
  list.push_back({"zombie children", [](const SoakSample& s) { return s.zombies; }, T::None});
  return list;
}

}  // namespace

void runSoakBenchmark(const SoakBenchConfig& c, Report& report) {
  const SoakResults r = measureSoak(c, std::cerr);
  report.parameters().update(Json{
      {"rounds", c.rounds}, {"workers", c.workers}, {"window", c.window}, {"restart_every", c.restartEvery},
      {"seed", c.seed}, {"model", c.model}, {"tensors", r.tensors}, {"bytes", r.bytes}, {"pause_mode", c.pauseMode},
      {"worker_step_ms", c.workerStepMs}, {"sample_every", r.sampleEvery}, {"bus", r.busName},
      {"coordinator", r.coordinatorPath + " --log-level " + c.childLogLevel + " (shm buckets " +
                          std::to_string(coordinator::kDefaultBucketBytes >> 20) + " MiB x " +
                          std::to_string(coordinator::kDefaultBufferCount) + ")"},
      {"worker", r.workerPath + " --channel shm"}, {"startup_ms", r.startupMs}, {"first_round_ms", r.firstRoundMs},
      {"others_cpu_share", r.othersCpuShare}});

  // Flatness: window 2 (the first after the warm-up) against the last; both run without restarts.
  const std::size_t first = 1;
  const std::size_t last = r.windows.size() - 1;
  const SoakWindow& w1 = r.windows[first];
  const SoakWindow& wn = r.windows[last];
  Table flatness({{"figure", "figure"}, {"first", "first window"}, {"last", "last window"}, {"ratio", "last/first"},
                  {"goal", "goal"}, {"met", "verdict"}});
  std::string missed;
  const auto check = [&](const std::string& name, double a, double b, const std::string& goal, bool met, bool better) {
    flatness.row({name, figure(a), figure(b), a > 0 ? ratio(b / a) : Cell("-"), goal,
                  Cell(met, verdict(met).text + (better ? " (better)" : ""))});
    if (!met) missed += (missed.empty() ? "" : ", ") + name;
  };
  // Throughput and latency within +-kSoakFlatTolerance; a miss on the good side (faster) says the machine changed.
  const std::string tolerance = "within +-" + fixed(kSoakFlatTolerance * 100, 0) + "%";
  const auto steady = [&](const std::string& name, double a, double b, bool higherIsBetter) {
    const bool met = a > 0 && std::abs(b / a - 1) <= kSoakFlatTolerance;
    check(name, a, b, tolerance, met, !met && a > 0 && (b > a) == higherIsBetter);
  };
  steady("rounds/s", w1.roundsPerSecond(), wn.roundsPerSecond(), true);
  steady("round time p50 (ms)", w1.roundTime.p50 / 1000, wn.roundTime.p50 / 1000, false);
  steady("round time p99 (ms)", w1.roundTime.p99 / 1000, wn.roundTime.p99 / 1000, false);
  // Resources: the last window's maximum at most the first's plus a tolerance.
  for (const Resource& resource : resources()) {
    const double a = windowMax(r, first, resource.value);
    const double b = windowMax(r, last, resource.value);
    double slack = 0;
    int decimals = 0;
    std::string goal = "<= first max";
    if (resource.tolerance == Resource::Tolerance::Memory) {
      decimals = 2;
      slack = std::max(kSoakRssToleranceShare * a, static_cast<double>(kSoakRssToleranceBytes) / kMiB);
      goal += " + max(" + fixed(kSoakRssToleranceShare * 100, 0) + "%, 1 MiB)";
    } else if (resource.tolerance == Resource::Tolerance::Fds) {
      slack = static_cast<double>(kSoakFdTolerance);
      goal += " + " + std::to_string(kSoakFdTolerance);
    }
    check(resource.figure, a, b, goal + " = " + fixed(a + slack, decimals), b <= a + slack, false);
  }
  report.json["flat"] = missed.empty();
  std::ostringstream text;
  text << "The baseline is the run's own beginning, window 2; it and the last window run without restarts, so the "
          "ratio compares like with like. Rounds/s and round times: the window's; resources: the window's maximum "
          "over its samples (RssAnon, the heap and stacks, is where a leak shows first). Other processes took "
       << percent(w1.othersCpuShare).text << " of the CPUs in the first window and "
       << percent(wn.othersCpuShare).text << " in the last"
       << (std::abs(w1.othersCpuShare - wn.othersCpuShare) > kSoakOthersShiftWarning
               ? ": the rounds/s and round-time ratios measure that change too"
               : "")
       << ". Goal, flat: **" << (missed.empty() ? "met" : "missed") << "**"
       << (missed.empty() ? "" : " (" + missed + ")") << ".";
  report.section("flatness", "Flatness: the last window against the first after the warm-up", text.str(), flatness);

  Table health({{"figure", "figure"}, {"value", "value"}, {"goal", "goal"}, {"met", "verdict"}});
  const auto zero = [&](const std::string& name, std::size_t value) {
    health.row({name, value, "0", verdict(value == 0)});
  };
  zero("aborted rounds not caused by a restart", r.unexpectedAborts);
  zero("refused rounds", r.refused);
  zero("workers that ended by themselves", r.unexpectedExits);
  zero("/dev/shm segments of the bus after the coordinator stopped", r.residueAfterStop.first);
  health.row({"wsync-coordinator's exit on SIGTERM", r.coordinatorExit, "exited with status 0",
              verdict(r.coordinatorExit == "exited with status 0")});
  report.section("health", "Health of the run", "", health);

  std::size_t abortedByRestart = 0;
  std::size_t shortRounds = 0;
  Table pooled({{"windows", ""}, {"count", "windows"}, {"committed", "committed rounds"},
                {"rounds_per_second", "rounds/s"}, {"p50_ms", "p50 ms"}, {"p99_ms", "p99 ms"}, {"max_ms", "max ms"},
                {"aborted", "aborted"}});
  std::vector<double> rate(2);
  for (const bool restarts : {false, true}) {
    std::size_t windows = 0;
    std::size_t rounds = 0;
    std::size_t aborted = 0;
    double seconds = 0;
    for (const SoakWindow& w : r.windows) {
      if (w.warmup || w.withRestarts != restarts) continue;
      ++windows;
      rounds += w.rounds;
      seconds += w.seconds;
      aborted += w.abortedByRestart + w.abortedOther;
    }
    const Summary& times = restarts ? r.withRestarts : r.withoutRestarts;
    rate[restarts ? 1 : 0] = seconds > 0 ? static_cast<double>(rounds) / seconds : 0;
    pooled.row({restarts ? "with restarts" : "without restarts", windows, times.samples, number(rate[restarts], 0),
                Cell(times.p50 / 1000, ms(times.p50)), Cell(times.p99 / 1000, ms(times.p99)),
                Cell(times.max / 1000, ms(times.max)), aborted});
  }
  const auto over = [](double with, double without) { return without > 0 ? ratio(with / without) : Cell("-"); };
  pooled.row({"with / without", "", "", over(rate[1], rate[0]), over(r.withRestarts.p50, r.withoutRestarts.p50),
              over(r.withRestarts.p99, r.withoutRestarts.p99), over(r.withRestarts.max, r.withoutRestarts.max)});
  if (r.withRestarts.samples > 0) {
    report.section("pooled", "Rounds with restarts against without (same run)",
                   "Committed rounds pooled over the windows without restarts (2 and the last) and over those with "
                   "them. Rounds/s counts every round, aborted ones too, and the time restarts and samples took.",
                   pooled);
  }

  Json& restarts = report.json["restarts"] = Json::array();
  std::size_t midRound = 0;
  std::size_t neverRejoined = 0;
  for (const SoakRestart& s : r.restarts) {
    restarts.push_back({{"round", s.round + 1}, {"worker", s.worker}, {"mid_round", s.midRound}, {"phase", s.phase},
                        {"delay_us", s.delayUs}, {"rejoin_ms", s.rejoinMs}});
    midRound += s.midRound ? 1 : 0;
    neverRejoined += s.rejoinMs < 0 ? 1 : 0;
  }
  for (const SoakWindow& w : r.windows) {
    abortedByRestart += w.abortedByRestart;
    shortRounds += w.roundsShortOfWorkers;
  }
  report.json["aborts_by_reason"] = r.abortsByReason;
  report.json["kill_phases"] = r.killPhases;
  report.json["aborted_round_time"] = roundTimes(r.abortedRoundTime);
  report.json["rejoin"] = roundTimes(r.rejoin);
  report.json["details"] = r.details;
  std::ostringstream& out = report.markdown;
  if (!r.restarts.empty() || !r.details.empty()) {
    out << "## Restarts\n\n- " << r.restarts.size() << " restarts: " << midRound << " while the trainer still waited "
        << "for the round's outcome, " << r.restarts.size() - midRound << " after it. The coordinator's round phase "
        << "at the kill:";
    for (const auto& [phase, count] : r.killPhases) out << " " << phase << " " << count << ";";
    out << "\n- Aborted rounds: " << abortedByRestart + r.unexpectedAborts << ", " << abortedByRestart
        << " of them naming a killed worker (expected), " << r.unexpectedAborts << " not. By reason:";
    for (const auto& [reason, count] : r.abortsByReason) out << " " << reason << " " << count << ";";
    if (r.abortedRoundTime.samples > 0) {
      out << " BeginUpdate to the trainer's Abort p50 " << ms(r.abortedRoundTime.p50) << " ms, max "
          << ms(r.abortedRoundTime.max) << " ms";
    }
    if (r.rejoin.samples > 0) {
      out << "\n- Rejoin, from the new process's start until it held an attached slot: p50 " << ms(r.rejoin.p50)
          << " ms, p99 " << ms(r.rejoin.p99) << " ms, max " << ms(r.rejoin.max) << " ms over " << r.rejoin.samples
          << " (re)starts" << (neverRejoined > 0 ? "; " + std::to_string(neverRejoined) + " killed again first" : "");
    }
    out << "\n- Rounds published while fewer than all workers were registered: " << shortRounds
        << "\n- Workers that ended by themselves (started again, and reported): " << r.unexpectedExits << "\n";
    for (const std::string& detail : r.details) out << "  - " << detail << "\n";
    out << "\n";
  }

  Table windows({{"window", "window"}, {"rounds", "rounds"}, {"restarts", "restarts"},
                 {"restarts_mid_round", "mid-round"}, {"aborted_by_restart", "aborted by a restart"},
                 {"aborted_other", "other aborts"}, {"rounds_per_second", "rounds/s"}, {"round_time", "p50 ms"},
                 {"p99_ms", "p99 ms"}, {"max_ms", "max ms"}, {"coordinator", "coordinator RSS (anon) / fds / threads"},
                 {"trainer", "trainer RSS (anon) / fds / threads"}, {"resident_worker", "worker-0 RSS (anon) / fds"},
                 {"workers_max_rss_mib", "workers max RSS"}, {"shm_segments", "/dev/shm"},
                 {"children", "children (zombies)"}, {"dead_slots", "dead slots"},
                 {"others_cpu_share", "others' CPU"}});
  for (std::size_t index = 0; index < r.windows.size(); ++index) {
    const SoakWindow& w = r.windows[index];
    const auto max = [&](const std::function<double(const SoakSample&)>& value) {
      return windowMax(r, index, value);
    };
    const auto usage = [&](ProcessUsage SoakSample::*who, bool threads) {
      const double rss = max([who](const SoakSample& s) { return (s.*who).rssBytes; });
      const double anon = max([who](const SoakSample& s) { return (s.*who).anonBytes; });
      const double fds = max([who](const SoakSample& s) { return (s.*who).fds; });
      const double count = max([who](const SoakSample& s) { return (s.*who).threads; });
      Json json{{"rss_max", rss}, {"anon_max", anon}, {"fds_max", fds}};
      if (threads) json["threads_max"] = count;
      return Cell(json, mib(static_cast<std::uint64_t>(rss)) + " (" + mib(static_cast<std::uint64_t>(anon)) + ") / " +
                            figure(fds).text + (threads ? " / " + figure(count).text : ""));
    };
    const double zombies = max([](const SoakSample& s) { return s.zombies; });
    windows.row({std::to_string(index + 1) + (w.warmup ? " (warm-up)" : w.withRestarts ? "" : " (no restarts)"),
                 w.rounds, w.restarts, w.restartsMidRound, w.abortedByRestart, w.abortedOther,
                 number(w.roundsPerSecond(), 0), Cell(roundTimes(w.roundTime), ms(w.roundTime.p50)),
                 Cell(w.roundTime.p99 / 1000, ms(w.roundTime.p99)), Cell(w.roundTime.max / 1000, ms(w.roundTime.max)),
                 usage(&SoakSample::coordinator, true), usage(&SoakSample::trainer, true),
                 usage(&SoakSample::resident, false), number(max([](const SoakSample& s) { return s.workersMaxRss; }) / kMiB, 1),
                 figure(max([](const SoakSample& s) { return s.shmSegments; })),
                 Cell(max([](const SoakSample& s) { return s.children; }),
                      figure(max([](const SoakSample& s) { return s.children; })).text +
                          (zombies > 0 ? " (" + figure(zombies).text + ")" : "")),
                 figure(max([](const SoakSample& s) { return s.deadSlots; })), percent(w.othersCpuShare)});
  }
  report.section("windows", "Windows",
                 "Round time: committed rounds. RSS in MiB and fds: the window's maximum. Workers: worker-0 (never "
                 "restarted) and the largest RSS of any live worker. Children: this process's.",
                 windows);

  Json& samples = report.json["samples"] = Json::array();
  for (const SoakSample& s : r.samples) {
    samples.push_back({{"round", s.round}, {"seconds", s.seconds}, {"coordinator", toJson(s.coordinator)},
                       {"trainer", toJson(s.trainer)}, {"resident_worker", toJson(s.resident)},
                       {"workers_max_rss", s.workersMaxRss}, {"workers_sum_rss", s.workersSumRss},
                       {"workers_max_fds", s.workersMaxFds}, {"live_workers", s.liveWorkers},
                       {"shm_segments", s.shmSegments}, {"runtime_files", s.runtimeFiles}, {"children", s.children},
                       {"zombies", s.zombies}, {"active_slots", s.activeSlots}, {"dead_slots", s.deadSlots}});
  }
  report.json["after_stop"] = {{"coordinator_exit", r.coordinatorExit}, {"shm_segments", r.residueAfterStop.first},
                               {"runtime_files", r.residueAfterStop.second}};
  out << "## After the run\n\nThe trainer said goodbye, the workers got SIGTERM together, then the coordinator: "
         "`wsync-coordinator` "
      << r.coordinatorExit << ". Left of the bus: " << r.residueAfterStop.first << " /dev/shm segments, "
      << r.residueAfterStop.second << " runtime files.\n\n";
}

}  // namespace wsync::bench
