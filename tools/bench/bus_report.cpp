// `wsync-bench bus`: the latency measurements and the version read, and their report.
#include <iostream>

#include "bus.hpp"
#include "latency_paths.hpp"

namespace wsync::bench {
namespace {

std::string us(double value) { return fixed(value, value < 100 ? 1 : 0); }
bool goalMet(const LatencyComparison& comparison) { return comparison.p50Ratio() <= kMaxBusToRawRatio; }

Json toJson(const ReadCost& cost) { return {{"median_ns", cost.medianNs}, {"min_ns", cost.minNs}}; }

Json withGoal(const LatencyComparison& comparison) {
  Json json = toJson(comparison);
  json["p50_ratio"] = comparison.p50Ratio();
  json["goal_met"] = goalMet(comparison);
  return json;
}

std::string warmupLine(std::size_t iterations) {
  return std::to_string(iterations) + " per path (+" + std::to_string(warmupFor(iterations)) + " warm-up)";
}

}  // namespace

void runBusBenchmark(const BusBenchConfig& c, Report& report) {
  const VersionReadResult v = runVersionReadBenchmark(c, std::cerr);
  const LatencyResults l = runLatencyBenchmarks(c, std::cerr);
  const MessageSizes s = busMessageSizes();

  report.json["parameters"].update(Json{{"round_trips", c.roundTrips}, {"pause_rounds", c.pauseRounds},
                                        {"block", c.block}, {"version_reads", c.versionReads},
                                        {"version_repetitions", c.versionRepetitions},
                                        {"message_bytes", {{"snapshot_request", s.request}, {"snapshot_reply", s.reply},
                                        {"pause", s.pause}, {"pause_ack", s.pauseAck}}}});
  report.json["round_trip"] = withGoal(l.roundTrip);
  Json& fanout = report.json["pause_fanout"] = Json::array();
  for (const FanoutResult& f : l.fanout) {
    fanout.push_back({{"agents", f.agents}, {"join_ms", f.joinMs}, {"stale_acks", f.staleAcks},
                      {"latency", withGoal(f.latency)}});
  }
  report.json["version_read"] = {{"shared", toJson(v.shared)}, {"local", toJson(v.local)},
                                 {"shared_contended", toJson(v.sharedContended)},
                                 {"local_contended", toJson(v.localContended)},
                                 {"goal_met", v.shared.medianNs < kMaxVersionReadNs}};

  std::ostringstream& out = report.markdown;
  out << "## Parameters\n\n"
      << "- Transport: ipc:// for both paths (bus `" << l.busEndpoint << "`, raw `" << l.rawEndpoint << "`)\n"
      << "- Round trips: " << warmupLine(c.roundTrips) << "\n"
      << "- Pause fan-out rounds: " << warmupLine(c.pauseRounds) << ", for N = ";
  for (std::size_t i = 0; i < c.agentCounts.size(); ++i) out << (i == 0 ? "" : ", ") << c.agentCounts[i];
  out << " agent processes\n- Interleaving: blocks of " << c.block
      << " iterations, bus and raw alternating, order flipped every pair\n"
      << "- Message sizes in bytes (raw frames are the same sizes): SnapshotRequest " << s.request
      << ", SnapshotReply " << s.reply << ", Pause " << s.pause << ", PauseAck " << s.pauseAck << "\n"
      << "- Version reads: " << c.versionRepetitions << " timed repetitions of " << c.versionReads
      << " reads each, median reported\n\n";

  const LatencyComparison& rt = l.roundTrip;
  const auto over = [](double bus, double raw) { return ratio(raw > 0 ? bus / raw : 0); };
  Table roundTrip("lrrr", {"", "bus", "raw ZeroMQ", "bus/raw"});
  roundTrip.row({"p50", us(rt.bus.p50), us(rt.raw.p50), over(rt.bus.p50, rt.raw.p50)});
  roundTrip.row({"p90", us(rt.bus.p90), us(rt.raw.p90), over(rt.bus.p90, rt.raw.p90)});
  roundTrip.row({"p99", us(rt.bus.p99), us(rt.raw.p99), over(rt.bus.p99, rt.raw.p99)});
  roundTrip.row({"samples", std::to_string(rt.bus.samples), std::to_string(rt.raw.samples), ""});
  out << "## Request/reply round trip (microseconds)\n\n"
      << "An agent process sends a SnapshotRequest over its DEALER; the coordinator's ROUTER receives and verifies it "
         "and answers with a SnapshotReply; the agent receives and verifies the reply. Timed by the agent.\n\n"
      << roundTrip << "Goal, bus p50 within " << fixed(kMaxBusToRawRatio, 1) << "x of raw: " << verdict(goalMet(rt))
      << " (" << ratio(rt.p50Ratio()) << ").\n\n";

  Table acks("rrrrrrrrl", {"N", "bus p50", "raw p50", "bus/raw p50", "bus p90", "raw p90", "bus p99", "raw p99",
                           "goal (p50 within " + fixed(kMaxBusToRawRatio, 1) + "x)"});
  for (const FanoutResult& f : l.fanout) {
    const LatencyComparison& x = f.latency;
    acks.row({std::to_string(f.agents), us(x.bus.p50), us(x.raw.p50), ratio(x.p50Ratio()), us(x.bus.p90),
              us(x.raw.p90), us(x.bus.p99), us(x.raw.p99), verdict(goalMet(x))});
  }
  out << "## Publish pause, collect N acks (microseconds)\n\n"
      << "The coordinator publishes a Pause on `round/pause`; N agent processes each answer with a PauseAck over their "
         "DEALER; timed from just before the Pause is built until the N-th ack is received and verified.\n\n"
      << acks;
  for (const FanoutResult& f : l.fanout) {
    if (f.staleAcks == 0) continue;
    out << "Note: with N = " << f.agents << ", " << f.staleAcks
        << " late acks to earlier rounds arrived while timing (they were skipped, but cost time).\n\n";
  }

  Table reads("lrrrl", {"", "bus (shared memory)", "process-local atomic", "bus/local",
                        "goal (bus under " + fixed(kMaxVersionReadNs, 0) + " ns)"});
  const auto row = [&reads](const char* what, const ReadCost& shared, const ReadCost& local, const std::string& goal) {
    reads.row({what, fixed(shared.medianNs, 2) + " (min " + fixed(shared.minNs, 2) + ")",
               fixed(local.medianNs, 2) + " (min " + fixed(local.minNs, 2) + ")",
               ratio(local.medianNs > 0 ? shared.medianNs / local.medianNs : 0), goal});
  };
  row("no writer", v.shared, v.local, verdict(v.shared.medianNs < kMaxVersionReadNs));
  row("a thread writing the version nonstop", v.sharedContended, v.localContended, "(worst case, for information)");
  out << "## Applied-version read (nanoseconds per read)\n\n"
      << "`ControlBlockView::appliedVersion(slot)` on a mapping of the control block, against "
         "`std::atomic<uint64_t>::load(acquire)` in process memory; per read, loop included.\n\n"
      << reads;
}

}  // namespace wsync::bench
