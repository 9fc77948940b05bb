#pragma once
// `wsync-bench round`: what an update round costs beyond moving its bytes. A coordinator in this process (on a thread
// of its own), N worker processes (real WorkerAgents in front of idle engines) and a TrainerAgent that publishes
// version after version in pause mode keep; the trainer's PublishOutcome splits every round into its phases. The
// same-run baseline is the request/reply round trip of `wsync-bench bus`.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "latency_benchmark.hpp"
#include "receive_tail.hpp"
#include "round_config.hpp"

namespace wsync::bench {

// One configuration (N workers, one manifest): percentiles over its measured rounds, in microseconds.
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
  Summary total;              // PublishOutcome::total: BeginUpdate sent -> Commit handled by the trainer
  Summary sending;            // PublishOutcome::sending: the trainer's send of every bucket, the data
  Summary overhead;           // total - sending, round by round
  Summary untilPlan;          // PublishOutcome::untilPlan: BeginUpdate -> TransferPlan (begin, pause, acks)
  Summary afterSend;          // send returned -> Commit: last buckets received, UpdateDones, verify, commit
  Summary caller;             // publish() called -> waitOutcome() returned, in the trainer's own thread
  Summary apply;              // waitOutcome() returned -> every worker reports the version applied
  Summary withMonitors;       // --monitors: `total` of the rounds with them attached (the others are without)
};

struct RoundResults {
  LatencyComparison baselineBefore;  // request/reply round trip with one agent process, before the rounds
  LatencyComparison baselineAfter;   // the same after them: the two show how much the machine drifted
  std::vector<RoundMeasurement> workerSweep;  // config.models, for each worker count
  std::vector<RoundMeasurement> countSweep;   // config.countWorkers, for each of config.countModels
  std::string busExample;                     // the name of one bus, to show where the endpoints were
  double othersCpuShare = 0;
  // The raw ZeroMQ round trip p50 that overheads are compared with: the mean of before and after.
  double rawRoundTripUs() const { return (baselineBefore.raw.p50 + baselineAfter.raw.p50) / 2; }
};

// Progress lines go to `progress`; failures throw BenchFailure after every process is stopped.
RoundResults measureRounds(const RoundBenchConfig& config, std::ostream& progress);

}  // namespace wsync::bench
