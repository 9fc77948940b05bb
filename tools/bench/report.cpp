#include "report.hpp"

#include <sstream>

#include "report_format.hpp"

namespace wsync::bench {
namespace {

std::string us(double value) { return fixed(value, value < 100 ? 1 : 0); }
bool ratioMet(const LatencyComparison& comparison) { return comparison.p50Ratio() <= kMaxBusToRawRatio; }

std::string warmupLine(std::size_t iterations) {
  return std::to_string(iterations) + " per path (+" + std::to_string(warmupFor(iterations)) + " warm-up)";
}

void parameterSection(std::ostringstream& out, const BusBenchReport& report) {
  const BusBenchConfig& c = report.config;
  const MessageSizes& s = report.latency.sizes;
  out << "## Parameters\n\n"
      << "- Mode: " << (c.quick ? "`--quick` (a demonstration; too few samples for conclusions)" : "full") << "\n"
      << "- Transport: ipc:// for both paths (bus `" << report.latency.busEndpoint << "`, raw `"
      << report.latency.rawEndpoint << "`)\n"
      << "- Round trips: " << warmupLine(c.roundTrips) << "\n"
      << "- Pause fan-out rounds: " << warmupLine(c.pauseRounds) << ", for N =";
  for (std::size_t i = 0; i < c.agentCounts.size(); ++i) out << (i == 0 ? " " : ", ") << c.agentCounts[i];
  out << " agent processes\n"
      << "- Interleaving: blocks of " << c.block
      << " iterations, bus and raw alternating, order flipped every pair\n"
      << "- Message sizes in bytes (raw frames are the same sizes): SnapshotRequest " << s.request
      << ", SnapshotReply " << s.reply << ", Pause " << s.pause << ", PauseAck " << s.pauseAck << "\n"
      << "- Version reads: " << c.versionRepetitions << " timed repetitions of " << c.versionReads
      << " reads each, median reported\n"
      << "- Wall time of the run: " << fixed(report.wallSeconds, 1) << " s\n\n";
}

void roundTripSection(std::ostringstream& out, const BusBenchReport& report) {
  const LatencyComparison& rt = report.latency.roundTrip;
  out << "## Request/reply round trip (microseconds)\n\n"
      << "An agent process sends a SnapshotRequest over its DEALER; the coordinator's ROUTER receives and verifies "
         "it and answers with a SnapshotReply; the agent receives and verifies the reply. Timed by the agent.\n\n"
      << "| | bus | raw ZeroMQ | bus/raw |\n|---|---:|---:|---:|\n"
      << "| p50 | " << us(rt.bus.p50Us) << " | " << us(rt.raw.p50Us) << " | " << ratio(rt.p50Ratio()) << " |\n"
      << "| p90 | " << us(rt.bus.p90Us) << " | " << us(rt.raw.p90Us) << " | "
      << ratio(rt.raw.p90Us > 0 ? rt.bus.p90Us / rt.raw.p90Us : 0) << " |\n"
      << "| p99 | " << us(rt.bus.p99Us) << " | " << us(rt.raw.p99Us) << " | "
      << ratio(rt.raw.p99Us > 0 ? rt.bus.p99Us / rt.raw.p99Us : 0) << " |\n"
      << "| samples | " << rt.bus.samples << " | " << rt.raw.samples << " | |\n\n"
      << "Goal, bus p50 within " << fixed(kMaxBusToRawRatio, 1) << "x of raw: " << verdict(ratioMet(rt)) << " ("
      << ratio(rt.p50Ratio()) << ").\n\n";
}

void fanoutSection(std::ostringstream& out, const BusBenchReport& report) {
  out << "## Publish pause, collect N acks (microseconds)\n\n"
      << "The coordinator publishes a Pause on `round/pause`; N agent processes each answer with a PauseAck over "
         "their DEALER; timed from just before the Pause is built until the N-th ack is received and verified.\n\n"
      << "| N | bus p50 | raw p50 | bus/raw p50 | bus p90 | raw p90 | bus p99 | raw p99 | goal (p50 within "
      << fixed(kMaxBusToRawRatio, 1) << "x) |\n"
      << "|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const FanoutResult& f : report.latency.fanout) {
    const LatencyComparison& l = f.latency;
    out << "| " << f.agents << " | " << us(l.bus.p50Us) << " | " << us(l.raw.p50Us) << " | " << ratio(l.p50Ratio())
        << " | " << us(l.bus.p90Us) << " | " << us(l.raw.p90Us) << " | " << us(l.bus.p99Us) << " | "
        << us(l.raw.p99Us) << " | " << verdict(ratioMet(l)) << " |\n";
  }
  out << "\n";
  for (const FanoutResult& f : report.latency.fanout) {
    if (f.staleAcks > 0) {
      out << "Note: with N = " << f.agents << ", " << f.staleAcks
          << " late acks to earlier rounds arrived while timing (they were skipped, but cost time).\n\n";
    }
  }
}

void versionSection(std::ostringstream& out, const BusBenchReport& report) {
  const VersionReadResult& v = report.versionRead;
  const auto row = [&out](const char* what, const ReadCost& shared, const ReadCost& local, const std::string& goal) {
    out << "| " << what << " | " << fixed(shared.medianNs, 2) << " (min " << fixed(shared.minNs, 2) << ") | "
        << fixed(local.medianNs, 2) << " (min " << fixed(local.minNs, 2) << ") | "
        << ratio(local.medianNs > 0 ? shared.medianNs / local.medianNs : 0) << " | " << goal << " |\n";
  };
  out << "## Applied-version read (nanoseconds per read)\n\n"
      << "`ControlBlockView::appliedVersion(slot)` on a mapping of the control block, against "
         "`std::atomic<uint64_t>::load(acquire)` in process memory; per read, loop included.\n\n"
      << "| | bus (shared memory) | process-local atomic | bus/local | goal (bus under "
      << fixed(kMaxVersionReadNs, 0) << " ns) |\n|---|---:|---:|---:|---|\n";
  row("no writer", v.shared, v.local, verdict(v.shared.medianNs < kMaxVersionReadNs));
  row("a thread writing the version nonstop", v.sharedContended, v.localContended,
      "(worst case, for information)");
  out << "\n";
}

void methodSection(std::ostringstream& out) {
  out << "## Method\n\n"
      << "- Bus and raw run in the same process, on the same agent processes, with the same socket options "
         "(`applyCommonOptions`, ROUTER_MANDATORY) and ipc:// endpoints from `resolveEndpoints`; the raw path sends "
         "frames of the bus messages' sizes and does no encoding or verification.\n"
      << "- Agents are separate processes (this executable, hidden subcommands, posix_spawn); each agent serves "
         "both paths and waits on both with one poll.\n"
      << "- Slow joiners: before timing, probe Pauses are published until every agent has acked one on each "
         "path; late probe acks are drained.\n"
      << "- Percentiles are nearest-rank over all measured samples of a path.\n";
}

std::string jsonLatency(const LatencySummary& s) {
  std::ostringstream out;
  out << "{\"samples\": " << s.samples << ", \"min_us\": " << fixed(s.minUs, 3) << ", \"p50_us\": "
      << fixed(s.p50Us, 3) << ", \"p90_us\": " << fixed(s.p90Us, 3) << ", \"p99_us\": " << fixed(s.p99Us, 3)
      << ", \"max_us\": " << fixed(s.maxUs, 3) << "}";
  return out.str();
}

std::string jsonComparison(const LatencyComparison& c) {
  return "{\"bus\": " + jsonLatency(c.bus) + ", \"raw\": " + jsonLatency(c.raw) +
         ", \"p50_ratio\": " + fixed(c.p50Ratio(), 4) + ", \"goal_met\": " + (ratioMet(c) ? "true" : "false") + "}";
}

std::string jsonReadCost(const ReadCost& cost) {
  return "{\"median_ns\": " + fixed(cost.medianNs, 3) + ", \"min_ns\": " + fixed(cost.minNs, 3) + "}";
}

}  // namespace

std::string renderMarkdown(const BusBenchReport& report) {
  std::ostringstream out;
  out << "# wsync-bench bus: " << report.machine.dateUtc << "\n\n";
  machineSection(out, report.machine);
  parameterSection(out, report);
  roundTripSection(out, report);
  fanoutSection(out, report);
  versionSection(out, report);
  methodSection(out);
  return out.str();
}

std::string renderJson(const BusBenchReport& report) {
  const BusBenchConfig& c = report.config;
  const MessageSizes& s = report.latency.sizes;
  std::ostringstream out;
  out << "{\n  \"mode\": \"bus\",\n"
      << "  \"machine\": " << machineJson(report.machine) << ",\n"
      << "  \"parameters\": {\"quick\": " << (c.quick ? "true" : "false") << ", \"round_trips\": " << c.roundTrips
      << ", \"pause_rounds\": " << c.pauseRounds << ", \"block\": " << c.block
      << ", \"version_reads\": " << c.versionReads << ", \"version_repetitions\": " << c.versionRepetitions
      << ", \"message_bytes\": {\"snapshot_request\": " << s.request << ", \"snapshot_reply\": " << s.reply
      << ", \"pause\": " << s.pause << ", \"pause_ack\": " << s.pauseAck << "}},\n"
      << "  \"round_trip\": " << jsonComparison(report.latency.roundTrip) << ",\n"
      << "  \"pause_fanout\": [";
  for (std::size_t i = 0; i < report.latency.fanout.size(); ++i) {
    const FanoutResult& f = report.latency.fanout[i];
    out << (i == 0 ? "\n" : ",\n") << "    {\"agents\": " << f.agents << ", \"join_ms\": " << fixed(f.joinMs, 1)
        << ", \"stale_acks\": " << f.staleAcks << ", \"latency\": " << jsonComparison(f.latency) << "}";
  }
  const VersionReadResult& v = report.versionRead;
  out << "\n  ],\n"
      << "  \"version_read\": {\"shared\": " << jsonReadCost(v.shared) << ", \"local\": " << jsonReadCost(v.local)
      << ", \"shared_contended\": " << jsonReadCost(v.sharedContended)
      << ", \"local_contended\": " << jsonReadCost(v.localContended)
      << ", \"goal_met\": " << (v.shared.medianNs < kMaxVersionReadNs ? "true" : "false") << "},\n"
      << "  \"wall_seconds\": " << fixed(report.wallSeconds, 2) << "\n}\n";
  return out.str();
}

}  // namespace wsync::bench
