#include "soak_report.hpp"

#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include <wsync/coordinator/coordinator_options.hpp>

#include "report_format.hpp"
#include "soak_flatness.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string ms(double microseconds) { return fixed(microseconds / 1000, microseconds < 100'000 ? 2 : 1); }
std::string mib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / kMiB, 1); }
std::string percent(double share) { return std::to_string(static_cast<int>(share * 100 + 0.5)) + "%"; }

bool allMet(const std::vector<SoakCheck>& checks) {
  for (const SoakCheck& check : checks) {
    if (!check.met) return false;
  }
  return true;
}

std::string figureValue(double value) {
  return value == static_cast<double>(static_cast<long long>(value)) ? std::to_string(static_cast<long long>(value))
                                                                       : fixed(value, value < 100 ? 2 : 1);
}

// "windows 3-19" for the windows with restarts, 1-based as in the tables.
std::string restartWindows(const SoakResults& r) {
  std::size_t first = 0, last = 0;
  for (const SoakWindow& window : r.windows) {
    if (!window.withRestarts) continue;
    if (first == 0) first = window.index + 1;
    last = window.index + 1;
  }
  if (first == 0) return "none";
  return first == last ? "window " + std::to_string(first)
                       : "windows " + std::to_string(first) + "-" + std::to_string(last);
}

void parameterSection(std::ostringstream& out, const SoakBenchReport& report) {
  const SoakBenchConfig& c = report.config;
  const SoakResults& r = report.results;
  out << "## Parameters\n\n"
      << "- Mode: " << (c.quick ? "`--quick` (a demonstration: short windows, noisy percentiles)" : "full") << "\n"
      << "- Coordinator: the real `wsync-coordinator` (`" << r.coordinatorPath << "`) on bus `" << r.busName
      << "`, default options (shm buckets " << (coordinator::kDefaultBucketBytes >> 20) << " MiB x "
      << coordinator::kDefaultBufferCount << ", heartbeat " << coordinator::kDefaultHeartbeatInterval.count() << " / "
      << coordinator::kDefaultHeartbeatTimeout.count() << " ms), `--log-level " << c.childLogLevel << "`\n"
      << "- Workers: " << c.workers << " real `wsync-worker` processes (`" << r.workerPath << "`), `--channel shm "
      << "--model " << c.model << " --step-ms " << c.workerStepMs << "`: each runs its stand-in engine (4 requests "
      << "in flight, a decode step every " << c.workerStepMs << " ms) while it takes part in the rounds\n"
      << "- Trainer: a `TrainerAgent` in this process, pause mode `" << c.pauseMode << "`; the next version is "
      << "published as soon as the outcome of the last one is in (back to back), 1/32 of its words changed per "
      << "version; a round whose outcome is an abort is not retried: the next step publishes the next version\n"
      << "- Manifest: `" << c.model << "`, " << r.tensors << " tensors, " << mib(r.bytes) << " MiB\n"
      << "- Rounds: " << c.rounds << " in " << r.windows.size() << " windows of " << c.window
      << "; window 1 is the warm-up, window 2 and the last run without restarts (the baseline, and the same state "
         "after every restart), restarts in "
      << restartWindows(r) << "\n";
  if (c.restartEvery > 0) {
    out << "- Restarts: one every " << c.restartEvery << " rounds on average (gaps uniform in " << c.restartEvery / 2
        << "-" << c.restartEvery + c.restartEvery / 2 << " rounds), seed " << c.seed
        << "; the victim is any worker but worker-0 (the resident, which shows a worker's own growth), SIGKILLed a "
           "random time after the round's publish (uniform in 0 to "
        << fixed(kSoakKillDelayFactor, 0)
        << "x the previous window's round p50), reaped and started again at once under the same agent id\n";
  } else {
    out << "- Restarts: none (`--restart-every 0`)\n";
  }
  out << "- Samples: RSS (VmRSS), open fds (/proc/PID/fd) and threads of every process, the bus's /dev/shm segments "
         "and runtime files, child processes; every "
      << r.sampleEvery << " rounds and before the first\n"
      << "- Start-up (coordinator started until every worker and the trainer had registered): "
      << fixed(r.startupMs, 0) << " ms; first round (carries the manifest): " << fixed(r.firstRoundMs, 2) << " ms\n"
      << "- Wall time of the run: " << fixed(report.wallSeconds, 1) << " s; other processes used "
      << percent(r.othersCpuShare) << " of the CPUs meanwhile\n\n";
}

void checkTable(std::ostringstream& out, const std::vector<SoakCheck>& checks, bool withRatio) {
  out << (withRatio ? "| figure | first window | last window | last/first | goal | verdict |\n"
                      "|---|---:|---:|---:|---|---|\n"
                    : "| figure | value | goal | verdict |\n|---|---:|---|---|\n");
  for (const SoakCheck& check : checks) {
    if (withRatio) {
      out << "| " << check.figure << " | " << figureValue(check.first) << " | " << figureValue(check.last) << " | "
          << (check.first > 0 ? ratio(check.ratio) : std::string("-")) << " | " << check.goal << " | "
          << verdict(check.met) << (check.better ? " (better)" : "") << " |\n";
    } else {
      out << "| " << check.figure << " | " << figureValue(check.last) << " | " << check.goal << " | "
          << verdict(check.met) << " |\n";
    }
  }
  out << "\n";
}

void flatnessSection(std::ostringstream& out, const SoakBenchReport& report) {
  const SoakResults& r = report.results;
  const std::vector<SoakCheck> flat = flatnessChecks(r);
  const std::vector<SoakCheck> health = healthChecks(r);
  out << "## Flatness: the last window against the first after the warm-up\n\n"
      << "The baseline is the run's own beginning: window 2, measured in the same run. Both it and the last window run "
         "without restarts, so the ratio compares like with like; every restart of the run lies between them. "
         "Rounds/s and round times: the window's figure. RSS, fds, threads and counts: the window's maximum over its "
         "samples.\n\n";
  checkTable(out, flat, true);
  std::string missed;
  for (const SoakCheck& check : flat) {
    if (!check.met) missed += (missed.empty() ? "" : ", ") + check.figure;
  }
  const SoakWindow& first = r.windows[1];
  const SoakWindow& last = r.windows.back();
  out << "Other processes on the machine took " << percent(first.othersCpuShare) << " of the CPUs in the first window "
      << "and " << percent(last.othersCpuShare) << " in the last"
      << (std::abs(first.othersCpuShare - last.othersCpuShare) > kSoakOthersShiftWarning
              ? ": the rounds/s and round-time ratios measure that change too"
              : "")
      << ". RssAnon is the anonymous part of RSS (heap, stacks): a leak shows there first, while RSS also counts "
         "the shared pages of the arena and control block.\n\n";
  out << "Goal, flat: within +-" << fixed(kSoakFlatTolerance * 100, 0)
      << "% (RSS/fds: no growth beyond the first window's max + a small tolerance): **"
      << (allMet(flat) ? "met" : "missed") << "**" << (missed.empty() ? "" : " (" + missed + ")") << ".\n\n"
      << "Health of the run:\n\n";
  checkTable(out, health, false);
}

void restartComparison(std::ostringstream& out, const SoakResults& r) {
  if (r.withRestarts.samples == 0) return;
  std::size_t withoutWindows = 0, withWindows = 0;
  for (const SoakWindow& window : r.windows) {
    if (!window.warmup) ++(window.withRestarts ? withWindows : withoutWindows);
  }
  const auto row = [&](const char* label, std::size_t windows, double perSecond, const LatencySummary& time,
                       std::size_t aborted) {
    out << "| " << label << " | " << windows << " | " << time.samples << " | " << fixed(perSecond, 0) << " | "
        << ms(time.p50Us) << " | " << ms(time.p99Us) << " | " << ms(time.maxUs) << " | " << aborted << " |\n";
  };
  out << "## Rounds with restarts against without (same run)\n\n"
      << "Committed rounds pooled over the windows without restarts (2 and the last) and over those with them. "
         "Rounds/s counts every round, aborted ones too, and the time restarts and samples took.\n\n"
      << "| | windows | committed rounds | rounds/s | p50 ms | p99 ms | max ms | aborted |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  row("without restarts", withoutWindows, r.withoutRoundsPerSecond, r.withoutRestarts, r.withoutAborted);
  row("with restarts", withWindows, r.withRoundsPerSecond, r.withRestarts, r.withAborted);
  const auto over = [](double with, double without) { return without > 0 ? ratio(with / without) : std::string("-"); };
  out << "| with / without | | | " << over(r.withRoundsPerSecond, r.withoutRoundsPerSecond) << " | "
      << over(r.withRestarts.p50Us, r.withoutRestarts.p50Us) << " | "
      << over(r.withRestarts.p99Us, r.withoutRestarts.p99Us) << " | "
      << over(r.withRestarts.maxUs, r.withoutRestarts.maxUs)
      << " | |\n\n";
}

void restartSection(std::ostringstream& out, const SoakResults& r) {
  if (r.restarts.empty() && r.unexpectedExits == 0 && r.details.empty()) return;
  std::size_t midRound = 0, neverRejoined = 0, abortedByRestart = 0, shortRounds = 0;
  for (const SoakRestart& restart : r.restarts) {
    midRound += restart.midRound ? 1 : 0;
    neverRejoined += restart.rejoinMs < 0 ? 1 : 0;
  }
  for (const SoakWindow& window : r.windows) {
    abortedByRestart += window.abortedByRestart;
    shortRounds += window.roundsShortOfWorkers;
  }
  out << "## Restarts\n\n"
      << "- " << r.restarts.size() << " restarts: " << midRound << " while the trainer still waited for the round's "
      << "outcome, " << r.restarts.size() - midRound << " after it (between rounds). The coordinator's round phase at "
      << "the kill:";
  for (const auto& [phase, count] : r.killPhases) out << " " << phase << " " << count << ";";
  out << "\n- Aborted rounds: " << abortedByRestart + r.unexpectedAborts << ", " << abortedByRestart
      << " of them naming a killed worker (expected), " << r.unexpectedAborts << " not. By reason:";
  for (const auto& [reason, count] : r.abortsByReason) out << " " << reason << " " << count << ";";
  if (r.abortedRoundTime.samples > 0) {
    out << " time from BeginUpdate to the trainer's Abort p50 " << ms(r.abortedRoundTime.p50Us) << " ms, max "
        << ms(r.abortedRoundTime.maxUs) << " ms";
  }
  out << "\n";
  if (r.rejoin.samples > 0) {
    out << "- Rejoin, from the new process's start until it held an attached slot (seen between rounds, so to within "
           "a round): p50 "
        << ms(r.rejoin.p50Us) << " ms, p99 " << ms(r.rejoin.p99Us) << " ms, max " << ms(r.rejoin.maxUs) << " ms over "
        << r.rejoin.samples << " (re)starts";
    if (neverRejoined > 0) out << "; " << neverRejoined << " killed again before they had registered";
    out << "\n";
  }
  out << "- Rounds published while fewer than all workers were registered (a restarted one not back yet): "
      << shortRounds << "\n"
      << "- Workers that ended by themselves (started again, and reported): " << r.unexpectedExits << "\n";
  if (!r.details.empty()) {
    out << "- The first unexpected events:\n";
    for (const std::string& detail : r.details) out << "  - " << detail << "\n";
  }
  out << "\n";
}

void windowTable(std::ostringstream& out, const SoakResults& r) {
  out << "## Windows\n\n"
      << "Round time: committed rounds, BeginUpdate sent until the trainer handled the Commit "
         "(`PublishOutcome::total`). RSS in MiB and fds: the window's maximum. Workers: worker-0 (never restarted) and "
         "the largest RSS of any live worker. /dev/shm: the bus's segments. Children: this process's (the "
         "coordinator and the workers), zombies in brackets if any.\n\n"
      << "| window | rounds | restarts (mid-round) | aborted (restart / other) | rounds/s | p50 ms | p99 ms | max ms | "
         "coordinator RSS (anon) / fds / threads | trainer RSS (anon) / fds / threads | worker-0 RSS (anon) / fds | "
         "workers max RSS | "
         "/dev/shm | children | dead slots | others' CPU |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const SoakWindow& w : r.windows) {
    out << "| " << w.index + 1 << (w.warmup ? " (warm-up)" : w.withRestarts ? "" : " (no restarts)") << " | "
        << w.rounds << " | " << w.restarts << " (" << w.restartsMidRound << ") | " << w.abortedByRestart << " / "
        << w.abortedOther << " | " << fixed(w.roundsPerSecond(), 0) << " | " << ms(w.roundTime.p50Us) << " | "
        << ms(w.roundTime.p99Us) << " | " << ms(w.roundTime.maxUs) << " | " << mib(w.coordinatorRss.max) << " ("
        << mib(w.coordinatorAnon.max) << ") / " << w.coordinatorFds.max << " / " << w.coordinatorThreads.max << " | "
        << mib(w.trainerRss.max) << " (" << mib(w.trainerAnon.max) << ") / " << w.trainerFds.max << " / "
        << w.trainerThreads.max << " | " << mib(w.residentRss.max) << " (" << mib(w.residentAnon.max) << ") / "
        << w.residentFds.max << " | " << mib(w.workersMaxRss.max) << " | " << w.shmSegments.max << " | "
        << w.children.max << (w.zombies.max > 0 ? " (" + std::to_string(w.zombies.max) + ")" : std::string()) << " | "
        << w.deadSlots.last << " | " << percent(w.othersCpuShare) << " |\n";
  }
  out << "\n";
}

void afterSection(std::ostringstream& out, const SoakResults& r) {
  out << "## After the run\n\n"
      << "The trainer said goodbye, the workers got SIGTERM together, then the coordinator: `wsync-coordinator` "
      << r.coordinatorExit << ". Left of the bus: " << r.residueAfterStop.shmSegments << " /dev/shm segments, "
      << r.residueAfterStop.runtimeFiles
      << " runtime files.\n\n";
}

void methodSection(std::ostringstream& out) {
  out << "## Method\n\n"
      << "- The trainer is a `TrainerAgent` in the benchmark process rather than `wsync-trainer`, so that each "
         "round's time is the agent's own `PublishOutcome::total` (BeginUpdate sent until the Commit or Abort is "
         "handled), with no process boundary or stdout parsing in it, and its RSS and fds are this process's. The "
         "benchmark's own bookkeeping is reserved before the first round, so growth of this process is the agent's.\n"
      << "- The programs are the real `wsync-coordinator` and `wsync-worker`, each in a process group of its own "
         "(Ctrl-C reaches the benchmark, which stops them in order), with every descriptor of the benchmark closed "
         "and a parent-death signal set between fork and exec (SIGTERM for the coordinator, so it removes its "
         "segments; SIGKILL for workers).\n"
      << "- A restart is SIGKILL, waitpid, and a new process with the same `--id`: the coordinator sees the old pid "
         "gone (its liveness check) or the new registration replaces the old one, whichever comes first. An abort "
         "counts as caused by a restart when its detail names a worker the run has killed.\n"
      << "- RSS is VmRSS: it includes the shared pages a process has touched (the arena, the control block), so a "
         "worker's RSS rises with its first rounds and then stays; worker-0 shows whether a worker that lives through "
         "every round and every peer's restart grows. fds include sockets, eventfds and mappings' descriptors; the "
         "trainer's count includes the one the listing itself opens.\n"
      << "- Percentiles are nearest-rank over a window's committed rounds. \"Others' CPU\" is the CPU time of "
         "processes not of this run (busy time of the machine less this process, its live children and the children "
         "it reaped), as a share of all cores: windows where it is high measured the neighbours too.\n";
}

std::string jsonRange(const SampledRange& range) {
  return "{\"min\": " + std::to_string(range.min) + ", \"max\": " + std::to_string(range.max) +
         ", \"last\": " + std::to_string(range.last) + "}";
}

std::string jsonLatency(const LatencySummary& s) {
  std::ostringstream out;
  out << "{\"samples\": " << s.samples << ", \"p50_us\": " << fixed(s.p50Us, 1) << ", \"p90_us\": " << fixed(s.p90Us, 1)
      << ", \"p99_us\": " << fixed(s.p99Us, 1) << ", \"max_us\": " << fixed(s.maxUs, 1) << "}";
  return out.str();
}

std::string jsonUsage(const ProcessUsage& u) {
  return "{\"alive\": " + jsonBool(u.alive) + ", \"rss\": " + std::to_string(u.rssBytes) +
         ", \"rss_anon\": " + std::to_string(u.anonBytes) + ", \"rss_shmem\": " + std::to_string(u.shmemBytes) +
         ", \"fds\": " + std::to_string(u.fds) + ", \"threads\": " + std::to_string(u.threads) + "}";
}

void jsonChecks(std::ostringstream& out, const char* name, const std::vector<SoakCheck>& checks) {
  out << "  \"" << name << "\": [";
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const SoakCheck& c = checks[i];
    out << (i == 0 ? "\n    " : ",\n    ") << "{\"figure\": " << jsonString(c.figure) << ", \"first\": "
        << fixed(c.first, 3) << ", \"last\": " << fixed(c.last, 3) << ", \"ratio\": " << fixed(c.ratio, 4)
        << ", \"goal\": " << jsonString(c.goal) << ", \"met\": " << jsonBool(c.met)
        << ", \"better\": " << jsonBool(c.better) << "}";
  }
  out << "\n  ],\n";
}

std::string jsonCounts(const std::map<std::string, std::size_t>& counts) {
  std::string out = "{";
  for (const auto& [key, count] : counts) {
    out += (out.size() > 1 ? ", " : "") + jsonString(key) + ": " + std::to_string(count);
  }
  return out + "}";
}

}  // namespace

std::string renderSoakMarkdown(const SoakBenchReport& report) {
  std::ostringstream out;
  out << "# wsync-bench soak: " << report.machine.dateUtc << "\n\n";
  machineSection(out, report.machine);
  parameterSection(out, report);
  flatnessSection(out, report);
  restartComparison(out, report.results);
  restartSection(out, report.results);
  windowTable(out, report.results);
  afterSection(out, report.results);
  methodSection(out);
  return out.str();
}

std::string renderSoakJson(const SoakBenchReport& report) {
  const SoakBenchConfig& c = report.config;
  const SoakResults& r = report.results;
  const std::vector<SoakCheck> flat = flatnessChecks(r);
  std::ostringstream out;
  out << "{\n  \"mode\": \"soak\",\n"
      << "  \"machine\": " << machineJson(report.machine) << ",\n"
      << "  \"parameters\": {\"quick\": " << jsonBool(c.quick) << ", \"rounds\": " << c.rounds
      << ", \"workers\": " << c.workers << ", \"window\": " << c.window << ", \"restart_every\": " << c.restartEvery
      << ", \"seed\": " << c.seed << ", \"model\": " << jsonString(c.model) << ", \"tensors\": " << r.tensors
      << ", \"bytes\": " << r.bytes << ", \"pause_mode\": " << jsonString(c.pauseMode)
      << ", \"worker_step_ms\": " << c.workerStepMs << ", \"sample_every\": " << r.sampleEvery
      << ", \"bus\": " << jsonString(r.busName) << ", \"coordinator\": " << jsonString(r.coordinatorPath)
      << ", \"worker\": " << jsonString(r.workerPath) << "},\n"
      << "  \"startup_ms\": " << fixed(r.startupMs, 1) << ",\n  \"first_round_ms\": " << fixed(r.firstRoundMs, 3)
      << ",\n  \"flat\": " << jsonBool(allMet(flat)) << ",\n";
  jsonChecks(out, "flatness", flat);
  jsonChecks(out, "health", healthChecks(r));
  out << "  \"without_restarts\": {\"rounds_per_second\": " << fixed(r.withoutRoundsPerSecond, 2)
      << ", \"aborted\": " << r.withoutAborted << ", \"round_time\": " << jsonLatency(r.withoutRestarts) << "},\n"
      << "  \"with_restarts\": {\"rounds_per_second\": " << fixed(r.withRoundsPerSecond, 2)
      << ", \"aborted\": " << r.withAborted << ", \"round_time\": " << jsonLatency(r.withRestarts) << "},\n"
      << "  \"aborts_by_reason\": " << jsonCounts(r.abortsByReason) << ",\n"
      << "  \"kill_phases\": " << jsonCounts(r.killPhases) << ",\n"
      << "  \"unexpected_aborts\": " << r.unexpectedAborts << ",\n  \"unexpected_exits\": " << r.unexpectedExits
      << ",\n  \"refused\": " << r.refused << ",\n  \"aborted_round_time\": " << jsonLatency(r.abortedRoundTime)
      << ",\n  \"rejoin\": " << jsonLatency(r.rejoin) << ",\n  \"details\": [";
  for (std::size_t i = 0; i < r.details.size(); ++i) out << (i == 0 ? "" : ", ") << jsonString(r.details[i]);
  out << "],\n  \"windows\": [";
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    const SoakWindow& w = r.windows[i];
    out << (i == 0 ? "\n    " : ",\n    ") << "{\"index\": " << w.index + 1 << ", \"first_round\": " << w.firstRound + 1
        << ", \"rounds\": " << w.rounds << ", \"warmup\": " << jsonBool(w.warmup)
        << ", \"with_restarts\": " << jsonBool(w.withRestarts) << ", \"committed\": " << w.committed
        << ", \"aborted_by_restart\": " << w.abortedByRestart << ", \"aborted_other\": " << w.abortedOther
        << ", \"refused\": " << w.refused << ", \"restarts\": " << w.restarts
        << ", \"restarts_mid_round\": " << w.restartsMidRound
        << ", \"rounds_short_of_workers\": " << w.roundsShortOfWorkers << ", \"seconds\": " << fixed(w.seconds, 3)
        << ", \"rounds_per_second\": " << fixed(w.roundsPerSecond(), 2)
        << ", \"others_cpu_share\": " << fixed(w.othersCpuShare, 3) << ",\n      \"round_time\": "
        << jsonLatency(w.roundTime) << ",\n      \"coordinator\": {\"rss\": " << jsonRange(w.coordinatorRss)
        << ", \"rss_anon\": " << jsonRange(w.coordinatorAnon)
        << ", \"fds\": " << jsonRange(w.coordinatorFds) << ", \"threads\": " << jsonRange(w.coordinatorThreads)
        << "},\n      \"trainer\": {\"rss\": " << jsonRange(w.trainerRss)
        << ", \"rss_anon\": " << jsonRange(w.trainerAnon)
        << ", \"fds\": " << jsonRange(w.trainerFds)
        << ", \"threads\": " << jsonRange(w.trainerThreads) << "},\n      \"resident_worker\": {\"rss\": "
        << jsonRange(w.residentRss) << ", \"rss_anon\": " << jsonRange(w.residentAnon)
        << ", \"fds\": " << jsonRange(w.residentFds)
        << ", \"threads\": " << jsonRange(w.residentThreads) << "},\n      \"workers_max\": {\"rss\": "
        << jsonRange(w.workersMaxRss) << ", \"fds\": " << jsonRange(w.workersMaxFds) << "}, \"shm_segments\": "
        << jsonRange(w.shmSegments) << ", \"runtime_files\": " << jsonRange(w.runtimeFiles)
        << ", \"children\": " << jsonRange(w.children) << ", \"zombies\": " << jsonRange(w.zombies)
        << ", \"dead_slots\": " << jsonRange(w.deadSlots) << "}";
  }
  out << "\n  ],\n  \"restarts\": [";
  for (std::size_t i = 0; i < r.restarts.size(); ++i) {
    const SoakRestart& s = r.restarts[i];
    out << (i == 0 ? "\n    " : ",\n    ") << "{\"round\": " << s.round + 1 << ", \"worker\": " << jsonString(s.worker)
        << ", \"mid_round\": " << jsonBool(s.midRound) << ", \"phase\": " << jsonString(s.phase)
        << ", \"delay_us\": " << fixed(s.delayUs, 1) << ", \"rejoin_ms\": " << fixed(s.rejoinMs, 2) << "}";
  }
  out << (r.restarts.empty() ? "],\n" : "\n  ],\n") << "  \"samples\": [";
  for (std::size_t i = 0; i < r.samples.size(); ++i) {
    const SoakSample& s = r.samples[i];
    out << (i == 0 ? "\n    " : ",\n    ") << "{\"round\": " << s.round << ", \"seconds\": " << fixed(s.seconds, 3)
        << ", \"coordinator\": " << jsonUsage(s.coordinator) << ", \"trainer\": " << jsonUsage(s.trainer)
        << ", \"resident_worker\": " << jsonUsage(s.resident) << ", \"workers_max_rss\": " << s.workersMaxRss
        << ", \"workers_sum_rss\": " << s.workersSumRss << ", \"workers_max_fds\": " << s.workersMaxFds
        << ", \"live_workers\": " << s.liveWorkers << ", \"shm_segments\": " << s.residue.shmSegments
        << ", \"runtime_files\": " << s.residue.runtimeFiles << ", \"children\": " << s.children.count
        << ", \"zombies\": " << s.children.zombies << ", \"active_slots\": " << s.activeSlots
        << ", \"dead_slots\": " << s.deadSlots << "}";
  }
  out << "\n  ],\n  \"after_stop\": {\"coordinator_exit\": " << jsonString(r.coordinatorExit)
      << ", \"shm_segments\": " << r.residueAfterStop.shmSegments
      << ", \"runtime_files\": " << r.residueAfterStop.runtimeFiles << "},\n"
      << "  \"others_cpu_share\": " << fixed(r.othersCpuShare, 3) << ",\n"
      << "  \"wall_seconds\": " << fixed(report.wallSeconds, 2) << "\n}\n";
  return out.str();
}

}  // namespace wsync::bench
