// `wsync-bench soak`: the run, its verdicts (is the last window like the first after the warm-up, both without
// restarts?) and its report.
#include <cmath>
#include <iostream>

#include <wsync/coordinator/coordinator_options.hpp>

#include "soak.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string ms(double microseconds) { return fixed(microseconds / 1000, microseconds < 100'000 ? 2 : 1); }
std::string mib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / kMiB, 1); }
std::string figureValue(double value) {
  return value == std::floor(value) ? std::to_string(static_cast<long long>(value)) : fixed(value, value < 100 ? 2 : 1);
}

// One verdict: a figure of the last window against the first after the warm-up, or a count that must be 0.
struct SoakCheck {
  std::string figure;   // "rounds/s", "coordinator RSS (MiB)", ...
  double first = 0;     // the first window after the warm-up (RSS, fds and counts: its maximum)
  double last = 0;      // the last window (likewise)
  std::string goal;     // in words, with the limit
  bool met = false;
  bool better = false;  // missed, but on the good side (faster, fewer): the machine changed, not the bus
  double ratio() const { return first > 0 ? last / first : 0; }
};

// Throughput and latency: within +-kSoakFlatTolerance. `higherIsBetter` says which side of a miss is an improvement.
SoakCheck withinTolerance(std::string figure, double first, double last, bool higherIsBetter) {
  const double lastOverFirst = first > 0 ? last / first : 0;
  const bool met = first > 0 && std::abs(lastOverFirst - 1) <= kSoakFlatTolerance;
  return {std::move(figure), first, last,
          "within +-" + fixed(kSoakFlatTolerance * 100, 0) + "% (" + ratio(1 - kSoakFlatTolerance) + " to " +
              ratio(1 + kSoakFlatTolerance) + ")",
          met, !met && first > 0 && (lastOverFirst > 1) == higherIsBetter};
}

// A resource: the last window's maximum at most the first window's maximum plus `tolerance` (in the figure's unit).
SoakCheck noGrowth(std::string figure, const SampledRange& first, const SampledRange& last, double scale,
                   double tolerance, const std::string& toleranceText) {
  const double firstMax = static_cast<double>(first.max) / scale;
  const double lastMax = static_cast<double>(last.max) / scale;
  return {std::move(figure), firstMax, lastMax,
          "<= first max" + toleranceText + " = " + fixed(firstMax + tolerance, scale > 1 ? 2 : 0),
          lastMax <= firstMax + tolerance, false};
}

// Memory: the last window's maximum at most the first's plus max(5%, 1 MiB): malloc arenas and ZeroMQ's buffers
// breathe a little.
SoakCheck memoryCheck(const std::string& figure, const SampledRange& first, const SampledRange& last) {
  const double tolerance = std::max(kSoakRssToleranceShare * static_cast<double>(first.max),
                                    static_cast<double>(kSoakRssToleranceBytes));
  return noGrowth(figure + " (MiB)", first, last, kMiB, tolerance / kMiB,
                  " + max(" + fixed(kSoakRssToleranceShare * 100, 0) + "%, " +
                      fixed(static_cast<double>(kSoakRssToleranceBytes) / kMiB, 0) + " MiB)");
}

SoakCheck fdCheck(const std::string& figure, const SampledRange& first, const SampledRange& last) {
  const auto tolerance = static_cast<double>(kSoakFdTolerance);
  return noGrowth(figure, first, last, 1, tolerance, " + " + std::to_string(kSoakFdTolerance));
}

void addUsageChecks(std::vector<SoakCheck>& checks, const std::string& who, const UsageRanges& first,
                    const UsageRanges& last) {
  checks.push_back(memoryCheck(who + " RSS", first.rss, last.rss));
  checks.push_back(memoryCheck(who + " RssAnon", first.anon, last.anon));
  checks.push_back(fdCheck(who + " open fds", first.fds, last.fds));
  checks.push_back(noGrowth(who + " threads", first.threads, last.threads, 1, 0, ""));
}

std::vector<SoakCheck> flatnessChecks(const SoakResults& r) {
  std::vector<SoakCheck> checks;
  if (r.windows.size() < kSoakMinWindows) return checks;
  const SoakWindow& first = r.windows[1];
  const SoakWindow& last = r.windows.back();
  checks.push_back(withinTolerance("rounds/s", first.roundsPerSecond(), last.roundsPerSecond(), true));
  const Summary& a = first.roundTime;
  const Summary& b = last.roundTime;
  checks.push_back(withinTolerance("round time p50 (ms)", a.p50 / 1000, b.p50 / 1000, false));
  checks.push_back(withinTolerance("round time p99 (ms)", a.p99 / 1000, b.p99 / 1000, false));
  addUsageChecks(checks, "coordinator", first.coordinator, last.coordinator);
  addUsageChecks(checks, "trainer (this process)", first.trainer, last.trainer);
  addUsageChecks(checks, "worker-0 (resident)", first.resident, last.resident);
  checks.push_back(memoryCheck("largest worker RSS", first.workersMaxRss, last.workersMaxRss));
  checks.push_back(fdCheck("most fds of a worker", first.workersMaxFds, last.workersMaxFds));
  checks.push_back(noGrowth("/dev/shm segments of the bus", first.shmSegments, last.shmSegments, 1, 0, ""));
  checks.push_back(noGrowth("runtime files of the bus", first.runtimeFiles, last.runtimeFiles, 1, 0, ""));
  checks.push_back(noGrowth("child processes", first.children, last.children, 1, 0, ""));
  checks.push_back(noGrowth("zombie children", first.zombies, last.zombies, 1, 0, ""));
  return checks;
}

// The health of the run: every aborted round caused by a restart, no worker ending by itself, a clean stop.
std::vector<SoakCheck> healthChecks(const SoakResults& r) {
  std::vector<SoakCheck> checks;
  const auto zero = [&](std::string figure, std::size_t value) {
    checks.push_back({std::move(figure), 0, static_cast<double>(value), "0", value == 0, false});
  };
  zero("aborted rounds not caused by a restart", r.unexpectedAborts);
  zero("refused rounds", r.refused);
  zero("workers that ended by themselves", r.unexpectedExits);
  zero("/dev/shm segments of the bus after the coordinator stopped", r.residueAfterStop.shmSegments);
  checks.push_back({"wsync-coordinator's exit on SIGTERM", 0, 0, "exited with status 0",
                    r.coordinatorExit == "exited with status 0", false});
  return checks;
}

Json toJson(const std::vector<SoakCheck>& checks) {
  Json json = Json::array();
  for (const SoakCheck& c : checks) {
    json.push_back({{"figure", c.figure}, {"first", c.first}, {"last", c.last}, {"ratio", c.ratio()},
                    {"goal", c.goal}, {"met", c.met}, {"better", c.better}});
  }
  return json;
}

Table checkTable(const std::vector<SoakCheck>& checks, bool withRatio) {
  using Header = std::vector<std::string>;
  Table table(withRatio ? "lrrrll" : "lrll", withRatio ? Header{"figure", "first window", "last window", "last/first",
                                                                "goal", "verdict"}
                                                       : Header{"figure", "value", "goal", "verdict"});
  for (const SoakCheck& c : checks) {
    const std::string judged = verdict(c.met) + (c.better ? " (better)" : "");
    if (withRatio) {
      table.row({c.figure, figureValue(c.first), figureValue(c.last), c.first > 0 ? ratio(c.ratio()) : "-", c.goal,
                 judged});
    } else {
      table.row({c.figure, figureValue(c.last), c.goal, judged});
    }
  }
  return table;
}

Json toJson(const SampledRange& range) { return {{"min", range.min}, {"max", range.max}, {"last", range.last}}; }
Json toJson(const UsageRanges& u) {
  return {{"rss", toJson(u.rss)}, {"rss_anon", toJson(u.anon)}, {"fds", toJson(u.fds)}, {"threads", toJson(u.threads)}};
}
Json toJson(const ProcessUsage& u) {
  return {{"alive", u.alive},  {"rss", u.rssBytes}, {"rss_anon", u.anonBytes}, {"rss_shmem", u.shmemBytes},
          {"fds", u.fds},      {"threads", u.threads}};
}
Json roundTimes(const Summary& s) { return toJson(s, "us", {"p50", "p90", "p99", "max"}); }

void addJson(Json& json, const SoakResults& r, const std::vector<SoakCheck>& flat, bool allFlat) {
  json["startup_ms"] = r.startupMs;
  json["first_round_ms"] = r.firstRoundMs;
  json["flat"] = allFlat;
  json["flatness"] = toJson(flat);
  json["health"] = toJson(healthChecks(r));
  json["without_restarts"] = {{"rounds_per_second", r.withoutRoundsPerSecond}, {"aborted", r.withoutAborted},
                              {"round_time", roundTimes(r.withoutRestarts)}};
  json["with_restarts"] = {{"rounds_per_second", r.withRoundsPerSecond}, {"aborted", r.withAborted},
                           {"round_time", roundTimes(r.withRestarts)}};
  json["aborts_by_reason"] = r.abortsByReason;
  json["kill_phases"] = r.killPhases;
  json["unexpected_aborts"] = r.unexpectedAborts;
  json["unexpected_exits"] = r.unexpectedExits;
  json["refused"] = r.refused;
  json["aborted_round_time"] = roundTimes(r.abortedRoundTime);
  json["rejoin"] = roundTimes(r.rejoin);
  json["details"] = r.details;
  Json& windows = json["windows"] = Json::array();
  for (const SoakWindow& w : r.windows) {
    windows.push_back({{"index", w.index + 1}, {"first_round", w.firstRound + 1}, {"rounds", w.rounds},
                       {"warmup", w.warmup}, {"with_restarts", w.withRestarts}, {"committed", w.committed},
                       {"aborted_by_restart", w.abortedByRestart}, {"aborted_other", w.abortedOther},
                       {"refused", w.refused}, {"restarts", w.restarts}, {"restarts_mid_round", w.restartsMidRound},
                       {"rounds_short_of_workers", w.roundsShortOfWorkers}, {"seconds", w.seconds},
                       {"rounds_per_second", w.roundsPerSecond()}, {"others_cpu_share", w.othersCpuShare},
                       {"round_time", roundTimes(w.roundTime)}, {"coordinator", toJson(w.coordinator)},
                       {"trainer", toJson(w.trainer)}, {"resident_worker", toJson(w.resident)},
                       {"workers_max", {{"rss", toJson(w.workersMaxRss)}, {"fds", toJson(w.workersMaxFds)}}},
                       {"shm_segments", toJson(w.shmSegments)}, {"runtime_files", toJson(w.runtimeFiles)},
                       {"children", toJson(w.children)}, {"zombies", toJson(w.zombies)},
                       {"dead_slots", toJson(w.deadSlots)}});
  }
  Json& restarts = json["restarts"] = Json::array();
  for (const SoakRestart& s : r.restarts) {
    restarts.push_back({{"round", s.round + 1}, {"worker", s.worker}, {"mid_round", s.midRound}, {"phase", s.phase},
                        {"delay_us", s.delayUs}, {"rejoin_ms", s.rejoinMs}});
  }
  Json& samples = json["samples"] = Json::array();
  for (const SoakSample& s : r.samples) {
    samples.push_back({{"round", s.round}, {"seconds", s.seconds}, {"coordinator", toJson(s.coordinator)},
                       {"trainer", toJson(s.trainer)}, {"resident_worker", toJson(s.resident)},
                       {"workers_max_rss", s.workersMaxRss}, {"workers_sum_rss", s.workersSumRss},
                       {"workers_max_fds", s.workersMaxFds}, {"live_workers", s.liveWorkers},
                       {"shm_segments", s.residue.shmSegments}, {"runtime_files", s.residue.runtimeFiles},
                       {"children", s.children.count}, {"zombies", s.children.zombies}, {"active_slots", s.activeSlots},
                       {"dead_slots", s.deadSlots}});
  }
  json["after_stop"] = {{"coordinator_exit", r.coordinatorExit}, {"shm_segments", r.residueAfterStop.shmSegments},
                        {"runtime_files", r.residueAfterStop.runtimeFiles}};
  json["others_cpu_share"] = r.othersCpuShare;
}

}  // namespace

void runSoakBenchmark(const SoakBenchConfig& c, Report& report) {
  const SoakResults r = measureSoak(c, std::cerr);
  const std::vector<SoakCheck> flat = flatnessChecks(r);
  std::string missed;
  for (const SoakCheck& check : flat) {
    if (!check.met) missed += (missed.empty() ? "" : ", ") + check.figure;
  }
  report.json["parameters"].update(Json{{"rounds", c.rounds}, {"workers", c.workers}, {"window", c.window},
                                        {"restart_every", c.restartEvery}, {"seed", c.seed}, {"model", c.model},
                                        {"tensors", r.tensors}, {"bytes", r.bytes}, {"pause_mode", c.pauseMode},
                                        {"worker_step_ms", c.workerStepMs}, {"sample_every", r.sampleEvery},
                                        {"bus", r.busName}, {"coordinator", r.coordinatorPath},
                                        {"worker", r.workerPath}});
  addJson(report.json, r, flat, missed.empty());

  std::size_t first = 0, lastWithRestarts = 0;
  for (const SoakWindow& w : r.windows) {
    if (!w.withRestarts) continue;
    if (first == 0) first = w.index + 1;
    lastWithRestarts = w.index + 1;
  }
  std::ostringstream& out = report.markdown;
  out << "## Parameters\n\n"
      << "- Coordinator: the real `wsync-coordinator` (`" << r.coordinatorPath << "`) on bus `" << r.busName
      << "`, default options (shm buckets " << (coordinator::kDefaultBucketBytes >> 20) << " MiB x "
      << coordinator::kDefaultBufferCount << ", heartbeat " << coordinator::kDefaultHeartbeatInterval.count() << " / "
      << coordinator::kDefaultHeartbeatTimeout.count() << " ms), `--log-level " << c.childLogLevel << "`\n"
      << "- Workers: " << c.workers << " real `wsync-worker` processes (`" << r.workerPath << "`), `--channel shm "
      << "--model " << c.model << " --step-ms " << c.workerStepMs << "`, each running its stand-in engine\n"
      << "- Trainer: a `TrainerAgent` in this process, pause mode `" << c.pauseMode << "`, rounds back to back, 1/32 "
      << "of the words changed per version; an aborted round is not retried\n"
      << "- Manifest: `" << c.model << "`, " << r.tensors << " tensors, " << mib(r.bytes) << " MiB\n"
      << "- Rounds: " << c.rounds << " in " << r.windows.size() << " windows of " << c.window
      << "; window 1 is the warm-up, window 2 and the last run without restarts, restarts in "
      << (first == 0 ? "none" : "windows " + std::to_string(first) + "-" + std::to_string(lastWithRestarts)) << "\n";
  if (c.restartEvery > 0) {
    out << "- Restarts: one every " << c.restartEvery << " rounds on average (gaps uniform in " << c.restartEvery / 2
        << "-" << c.restartEvery + c.restartEvery / 2 << " rounds), seed " << c.seed << "; any worker but worker-0, "
        << "SIGKILLed a random time after the round's publish (uniform in 0 to " << fixed(kSoakKillDelayFactor, 0)
        << "x the previous window's round p50), reaped and started again at once under the same agent id\n";
  }
  out << "- Samples: RSS, open fds and threads of every process, the bus's /dev/shm segments and runtime files, child "
         "processes; every "
      << r.sampleEvery << " rounds and before the first\n"
      << "- Start-up (coordinator started until every worker and the trainer had registered): "
      << fixed(r.startupMs, 0) << " ms; first round (carries the manifest): " << fixed(r.firstRoundMs, 2) << " ms; "
      << "other processes used " << percent(r.othersCpuShare) << " of the CPUs during the run\n\n";

  const SoakWindow& w1 = r.windows[1];
  const SoakWindow& wn = r.windows.back();
  out << "## Flatness: the last window against the first after the warm-up\n\n"
      << "The baseline is the run's own beginning, window 2. Both it and the last window run without restarts, so the "
         "ratio compares like with like; every restart of the run lies between them. Rounds/s and round times: the "
         "window's figure. RSS, fds, threads and counts: the window's maximum over its samples. RssAnon is the "
         "anonymous part of RSS (heap, stacks): a leak shows there first.\n\n"
      << checkTable(flat, true) << "Other processes on the machine took " << percent(w1.othersCpuShare)
      << " of the CPUs in the first window and " << percent(wn.othersCpuShare) << " in the last"
      << (std::abs(w1.othersCpuShare - wn.othersCpuShare) > kSoakOthersShiftWarning
              ? ": the rounds/s and round-time ratios measure that change too"
              : "")
      << ".\n\nGoal, flat: within +-" << fixed(kSoakFlatTolerance * 100, 0)
      << "% (RSS/fds: no growth beyond the first window's max + a small tolerance): **"
      << (missed.empty() ? "met" : "missed") << "**" << (missed.empty() ? "" : " (" + missed + ")") << ".\n\n"
      << "Health of the run:\n\n"
      << checkTable(healthChecks(r), false);

  if (r.withRestarts.samples > 0) {
    std::size_t withoutWindows = 0, withWindows = 0;
    for (const SoakWindow& w : r.windows) {
      if (!w.warmup) ++(w.withRestarts ? withWindows : withoutWindows);
    }
    const auto over = [](double with, double without) { return without > 0 ? ratio(with / without) : "-"; };
    Table pooled("lrrrrrrr", {"", "windows", "committed rounds", "rounds/s", "p50 ms", "p99 ms", "max ms", "aborted"});
    pooled.row({"without restarts", std::to_string(withoutWindows), std::to_string(r.withoutRestarts.samples),
                fixed(r.withoutRoundsPerSecond, 0), ms(r.withoutRestarts.p50), ms(r.withoutRestarts.p99),
                ms(r.withoutRestarts.max), std::to_string(r.withoutAborted)});
    pooled.row({"with restarts", std::to_string(withWindows), std::to_string(r.withRestarts.samples),
                fixed(r.withRoundsPerSecond, 0), ms(r.withRestarts.p50), ms(r.withRestarts.p99),
                ms(r.withRestarts.max), std::to_string(r.withAborted)});
    pooled.row({"with / without", "", "", over(r.withRoundsPerSecond, r.withoutRoundsPerSecond),
                over(r.withRestarts.p50, r.withoutRestarts.p50), over(r.withRestarts.p99, r.withoutRestarts.p99),
                over(r.withRestarts.max, r.withoutRestarts.max), ""});
    out << "## Rounds with restarts against without (same run)\n\n"
        << "Committed rounds pooled over the windows without restarts (2 and the last) and over those with them. "
           "Rounds/s counts every round, aborted ones too, and the time restarts and samples took.\n\n"
        << pooled;
  }

  if (!r.restarts.empty() || r.unexpectedExits > 0 || !r.details.empty()) {
    std::size_t midRound = 0, neverRejoined = 0, abortedByRestart = 0, shortRounds = 0;
    for (const SoakRestart& restart : r.restarts) {
      midRound += restart.midRound ? 1 : 0;
      neverRejoined += restart.rejoinMs < 0 ? 1 : 0;
    }
    for (const SoakWindow& w : r.windows) {
      abortedByRestart += w.abortedByRestart;
      shortRounds += w.roundsShortOfWorkers;
    }
    out << "## Restarts\n\n- " << r.restarts.size() << " restarts: " << midRound << " while the trainer still waited "
        << "for the round's outcome, " << r.restarts.size() - midRound << " after it. The coordinator's round phase "
        << "at the kill:";
    for (const auto& [phase, count] : r.killPhases) out << " " << phase << " " << count << ";";
    out << "\n- Aborted rounds: " << abortedByRestart + r.unexpectedAborts << ", " << abortedByRestart
        << " of them naming a killed worker (expected), " << r.unexpectedAborts << " not. By reason:";
    for (const auto& [reason, count] : r.abortsByReason) out << " " << reason << " " << count << ";";
    if (r.abortedRoundTime.samples > 0) {
      out << " time from BeginUpdate to the trainer's Abort p50 " << ms(r.abortedRoundTime.p50) << " ms, max "
          << ms(r.abortedRoundTime.max) << " ms";
    }
    if (r.rejoin.samples > 0) {
      out << "\n- Rejoin, from the new process's start until it held an attached slot (seen between rounds): p50 "
          << ms(r.rejoin.p50) << " ms, p99 " << ms(r.rejoin.p99) << " ms, max " << ms(r.rejoin.max) << " ms over "
          << r.rejoin.samples << " (re)starts";
      if (neverRejoined > 0) out << "; " << neverRejoined << " killed again before they had registered";
    }
    out << "\n- Rounds published while fewer than all workers were registered: " << shortRounds
        << "\n- Workers that ended by themselves (started again, and reported): " << r.unexpectedExits << "\n";
    for (const std::string& detail : r.details) out << "  - " << detail << "\n";
    out << "\n";
  }

  Table windows("lrrrrrrrrrrrrrrr", {"window", "rounds", "restarts (mid-round)", "aborted (restart / other)",
                                     "rounds/s", "p50 ms", "p99 ms", "max ms", "coordinator RSS (anon) / fds / threads",
                                     "trainer RSS (anon) / fds / threads", "worker-0 RSS (anon) / fds",
                                     "workers max RSS", "/dev/shm", "children", "dead slots", "others' CPU"});
  const auto usage = [](const UsageRanges& u, bool threads) {
    return mib(u.rss.max) + " (" + mib(u.anon.max) + ") / " + std::to_string(u.fds.max) +
           (threads ? " / " + std::to_string(u.threads.max) : "");
  };
  for (const SoakWindow& w : r.windows) {
    windows.row({std::to_string(w.index + 1) + (w.warmup ? " (warm-up)" : w.withRestarts ? "" : " (no restarts)"),
                 std::to_string(w.rounds), std::to_string(w.restarts) + " (" + std::to_string(w.restartsMidRound) + ")",
                 std::to_string(w.abortedByRestart) + " / " + std::to_string(w.abortedOther),
                 fixed(w.roundsPerSecond(), 0), ms(w.roundTime.p50), ms(w.roundTime.p99), ms(w.roundTime.max),
                 usage(w.coordinator, true), usage(w.trainer, true), usage(w.resident, false),
                 mib(w.workersMaxRss.max), std::to_string(w.shmSegments.max),
                 std::to_string(w.children.max) + (w.zombies.max > 0 ? " (" + std::to_string(w.zombies.max) + ")" : ""),
                 std::to_string(w.deadSlots.last), percent(w.othersCpuShare)});
  }
  out << "## Windows\n\n"
      << "Round time: committed rounds. RSS in MiB and fds: the window's maximum. Workers: worker-0 (never restarted) "
         "and the largest RSS of any live worker. Children: this process's, zombies in brackets if any.\n\n"
      << windows << "## After the run\n\n"
      << "The trainer said goodbye, the workers got SIGTERM together, then the coordinator: `wsync-coordinator` "
      << r.coordinatorExit << ". Left of the bus: " << r.residueAfterStop.shmSegments << " /dev/shm segments, "
      << r.residueAfterStop.runtimeFiles << " runtime files.\n\n";
}

}  // namespace wsync::bench
