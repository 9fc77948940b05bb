#pragma once
// `wsync-bench round`: what an update round costs beyond moving its bytes. A coordinator in this process (on a
// thread of its own), N worker processes (real WorkerAgents in front of idle engines) and a TrainerAgent that
// publishes version after version in pause mode keep; the trainer's PublishOutcome splits every round into its
// phases. The same-run baseline is the request/reply round trip of `wsync-bench bus`.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "latency_stats.hpp"
#include "receive_tail.hpp"
#include "round_config.hpp"

namespace wsync::bench {

// One configuration (N workers, one manifest): percentiles over its measured rounds.
struct RoundMeasurement {
  std::size_t workers = 0;
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  std::uint32_t buckets = 0;
  std::size_t warmup = 0;
  double joinMs = 0;          // the worker processes started until every one is registered
  double firstRoundMs = 0;    // round 1: carries the manifest to every worker and faults in their staging
  ReceiveTail tail;           // reference: one receiver's copy of what is left to it when the send returns
  double othersCpuShare = 0;  // CPU time of processes other than the benchmark's, as a share of all cores
  LatencySummary total;       // PublishOutcome::total: BeginUpdate sent -> Commit handled by the trainer
  LatencySummary sending;     // PublishOutcome::sending: the trainer's send of every bucket, the data
  LatencySummary overhead;    // total - sending, round by round
  LatencySummary untilPlan;   // PublishOutcome::untilPlan: BeginUpdate -> TransferPlan (begin, pause, acks)
  LatencySummary afterSend;   // send returned -> Commit: last buckets received, UpdateDones, verify, commit
  LatencySummary caller;      // publish() called -> waitOutcome() returned, in the trainer's own thread
  LatencySummary apply;       // waitOutcome() returned -> every worker reports the version applied
};

struct RoundResults {
  LatencyComparison baselineBefore;  // request/reply round trip with one agent process, before the rounds
  LatencyComparison baselineAfter;   // the same after them: the two show how much the machine drifted
  std::vector<RoundMeasurement> workerSweep;  // config.model, for each worker count
  std::vector<RoundMeasurement> countSweep;   // config.countWorkers, for each of config.countModels
  std::string busExample;                     // the name of one bus, to show where the endpoints were
  double othersCpuShare = 0;
  // The raw ZeroMQ round trip p50 that overheads are compared with: the mean of before and after.
  double rawRoundTripUs() const { return (baselineBefore.raw.p50Us + baselineAfter.raw.p50Us) / 2; }
};

// Progress lines go to `progress`; failures throw BenchFailure after every process is stopped.
RoundResults runRoundBenchmarks(const RoundBenchConfig& config, std::ostream& progress);

// Do monitors slow the rounds? One bus (the first model and worker count of `config`), its round times without
// monitors and with `monitors` wsync-mon processes attached (issue goal: under 2% apart).
struct MonitorMeasurement {
  std::string model;
  std::size_t workers = 0;
  std::size_t monitors = 0;
  std::size_t roundsPerPhase = 0;
  LatencySummary without;  // the phases before and after the monitors, together
  LatencySummary with;
  double othersCpuShare = 0;
};
MonitorMeasurement runMonitorBenchmark(const RoundBenchConfig& config, std::size_t monitors,
                                       const std::string& monBinary, std::ostream& progress);

}  // namespace wsync::bench
