// `wsync-bench shm`: the measurements and their report.
#include <algorithm>
#include <iostream>
#include <thread>

#include "shm.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string gbps(double value) { return fixed(value, 2); }
std::string spread(const Summary& s) { return gbps(s.median) + " (" + gbps(s.min) + "-" + gbps(s.max) + ")"; }
std::string mib(double bytes) { return fixed(bytes / kMiB, bytes < 10 * kMiB ? 2 : 0) + " MiB"; }
std::string geometry(const ShmMeasurement& m) {
  return fixed(static_cast<double>(m.bucketBytes) / kMiB, 0) + " MiB x " + std::to_string(m.buffers);
}
bool digestsAllEqual(const ShmMeasurement& m) { return m.digestsCompared > 0 && m.digestsEqual == m.digestsCompared; }
std::string digests(const ShmMeasurement& m) {
  const std::string count = std::to_string(m.digestsEqual) + "/" + std::to_string(m.digestsCompared);
  return digestsAllEqual(m) ? "all " + count : "**" + count + "**";
}
bool goalMet(const ShmMeasurement& m) { return m.ratio() >= kMinChannelToMemcpyRatio; }
double aggregate(const ShmMeasurement& m) { return m.channel.median * static_cast<double>(m.receivers); }
// The slower side against memcpy, per CPU-second: the ratio the channel would reach with both sides on separate cores
// and perfect overlap.
double cpuBoundRatio(const ShmMeasurement& m) {
  const double slower = std::min(m.senderCpu.median, m.receiverCpu.median);
  return m.memcpyCpu.median > 0 ? slower / m.memcpyCpu.median : 0;
}

Json toJson(const ShmMeasurement& m) {
  const auto gb = [](const Summary& s) { return toJson(s, "gbps", {"median", "min", "max"}); };
  Json json{{"model", m.model},   {"tensors", m.tensors}, {"bytes", m.modelBytes},   {"receivers", m.receivers},
            {"bucket_bytes", m.bucketBytes}, {"buffers", m.buffers}, {"buckets", m.buckets},
            {"skipped", m.skipped.empty() ? Json() : Json(m.skipped)}};
  if (!m.skipped.empty()) return json;
  json.update(Json{{"channel", gb(m.channel)}, {"sender", gb(m.sender)}, {"memcpy", gb(m.memcpy)},
                   {"memcpy_xxh3", gb(m.copyDigest)},
                   {"cpu", {{"sender", gb(m.senderCpu)}, {"receiver", gb(m.receiverCpu)}, {"memcpy", gb(m.memcpyCpu)},
                            {"memcpy_xxh3", gb(m.copyDigestCpu)}, {"bound_ratio", cpuBoundRatio(m)}}},
                   {"ratio", m.ratio()}, {"aggregate_gbps", aggregate(m)}, {"digests_compared", m.digestsCompared},
                   {"digests_equal", m.digestsEqual}, {"goal_met", goalMet(m)},
                   {"others_cpu_share", m.othersCpuShare}, {"busy_rounds", m.busyRounds}});
  return json;
}

Json toJson(const std::vector<ShmMeasurement>& list) {
  Json json = Json::array();
  for (const ShmMeasurement& m : list) json.push_back(toJson(m));
  return json;
}

}  // namespace

void runShmBenchmark(const ShmBenchConfig& c, Report& report) {
  const ShmResults r = measureShm(c, std::cerr);
  report.json["parameters"].update(Json{{"models", c.models}, {"fanout_receivers", c.fanoutReceivers},
                                        {"bucket_bytes", c.bucketMiB * 1024 * 1024}, {"buffers", c.buffers},
                                        {"plan_alignment", kShmPlanAlignment}, {"repetitions", c.repetitions},
                                        {"warmup_rounds", kShmWarmupRounds}, {"sweep_bucket_mib", c.sweepBucketMiB},
                                        {"sweep_buffers", c.sweepBuffers}, {"sweep_repetitions", c.sweepRepetitions},
                                        {"wait_for_quiet", c.waitForQuiet},
                                        {"min_ratio_goal", kMinChannelToMemcpyRatio}});
  report.json["memory"] = {{"available_bytes", r.availableMemoryBytes}, {"transparent_huge_pages", r.hugePages}};
  report.json["others_cpu_share"] = r.othersCpuShare;
  report.json["single"] = toJson(r.single);
  report.json["fanout"] = toJson(r.fanout);
  report.json["sweep"] = toJson(r.sweep);

  std::ostringstream& out = report.markdown;
  out << "Memory available at the start: " << fixed(static_cast<double>(r.availableMemoryBytes) / kMiB / 1024, 1)
      << " GiB; transparent huge pages: " << r.hugePages << ". Other processes used " << percent(r.othersCpuShare)
      << " of the machine's CPU time during the run (steal included; the tables give it per measurement).";
  if (std::thread::hardware_concurrency() <= 2) {
    out << " **2 vCPUs**: sender and receiver each have a core only with one receiver; with more receivers all "
           "processes share 2 cores, so the fan-out figures measure CPU sharing as much as the channel.";
  }
  std::size_t busy = 0;
  for (const auto* list : {&r.single, &r.fanout, &r.sweep}) {
    for (const ShmMeasurement& m : *list) busy += m.busyRounds;
  }
  out << "\n\n## Parameters\n\n"
      << "- Sender: the benchmark process, which owns the arena (e.g. `" << r.arenaExample
      << "` in /dev/shm); receivers: separate processes (`agent-shm-receive`)\n"
      << "- Geometry: buckets of " << c.bucketMiB << " MiB, " << c.buffers << " buffers; plan alignment "
      << kShmPlanAlignment << " bytes\n"
      << "- Repetitions: " << c.repetitions << " timed (+" << kShmWarmupRounds << " warm-up) per path and measurement "
      << "(geometry comparison: " << c.sweepRepetitions << "); the three paths (channel, memcpy, memcpy+XXH3) rotate "
      << "every round, the source moving to its next version (untimed) before each\n";
  if (c.waitForQuiet) {
    out << "- `--wait-for-quiet`: every round started once the CPUs had been at least "
        << percent(1 - kQuietMaxBusyShare) << " idle for " << kQuietWindow.count() << " ms; " << busy
        << " round(s) started without that after waiting " << kQuietWaitLimit.count() / 1000 << " s\n";
  }

  Table single("lrrrrrrlrrlr", {"model", "tensors", "size", "buckets", "channel", "memcpy", "channel/memcpy",
                                "goal (>= " + fixed(kMinChannelToMemcpyRatio, 1) + "x)", "memcpy+XXH3",
                                "sender alone", "digests equal", "others' CPU"});
  for (const ShmMeasurement& m : r.single) {
    single.row({m.model, std::to_string(m.tensors), mib(static_cast<double>(m.modelBytes)), std::to_string(m.buckets),
                spread(m.channel), spread(m.memcpy), ratio(m.ratio()), verdict(goalMet(m)), gbps(m.copyDigest.median),
                gbps(m.sender.median), digests(m), percent(m.othersCpuShare)});
  }
  out << "\n## One sender process, one receiver process (GB/s)\n\n"
      << "Channel: from the sender's call to `send` until the receiver's `receive` returned (its time stamp), model "
         "bytes over that time. memcpy: the same tensors copied one by one in the sender's process into a second copy "
         "of the model. Median (min-max) of the timed repetitions. memcpy+XXH3: memcpy, then XXH3-128 over the copy "
         "(the plain way to move and check the bytes). Sender alone: until `send` returned. Digests: every "
         "receiver's digest and byte count against the sender's, every transfer. Others' CPU: the share of the "
         "machine's CPU time other processes used meanwhile.\n\n"
      << single;

  if (!r.fanout.empty()) {
    Table fanout("lrrrrrrlr", {"model", "receivers", "per receiver", "aggregate", "per receiver/memcpy", "memcpy",
                               "sender alone", "digests equal", "others' CPU"});
    for (const ShmMeasurement& m : r.fanout) {
      if (!m.skipped.empty()) {
        fanout.row({m.model, std::to_string(m.receivers), "skipped: " + m.skipped, "", "", "", "", "", ""});
        continue;
      }
      fanout.row({m.model, std::to_string(m.receivers), spread(m.channel), gbps(aggregate(m)), ratio(m.ratio()),
                  gbps(m.memcpy.median), gbps(m.sender.median), digests(m), percent(m.othersCpuShare)});
    }
    out << "## One sender process, N receiver processes (GB/s)\n\n"
        << "Timed until the last receiver finished. Per receiver: model bytes over that time (what each receiver "
           "got); aggregate: N times that.\n\n"
        << fanout;
  }

  if (!r.sweep.empty()) {
    Table sweep("llrrrrrlr", {"model", "bucket x buffers", "buckets", "channel", "memcpy", "channel/memcpy",
                              "sender alone", "digests equal", "others' CPU"});
    for (const ShmMeasurement& m : r.sweep) {
      sweep.row({m.model, geometry(m), std::to_string(m.buckets), spread(m.channel), gbps(m.memcpy.median),
                 ratio(m.ratio()), gbps(m.sender.median), digests(m), percent(m.othersCpuShare)});
    }
    out << "## Bucket size and buffer count, one receiver (GB/s)\n\n" << sweep;
  }

  Table cpu("lrlrrrrr", {"model", "receivers", "bucket x buffers", "sender", "receiver", "memcpy", "memcpy+XXH3",
                         "bound/memcpy"});
  for (const auto* list : {&r.single, &r.fanout, &r.sweep}) {
    for (const ShmMeasurement& m : *list) {
      if (!m.skipped.empty()) continue;
      cpu.row({m.model, std::to_string(m.receivers), geometry(m), gbps(m.senderCpu.median), gbps(m.receiverCpu.median),
               gbps(m.memcpyCpu.median), gbps(m.copyDigestCpu.median), ratio(cpuBoundRatio(m))});
    }
  }
  out << "## Work per side (GB per CPU-second)\n\n"
      << "Model bytes over the CPU time of the thread doing the work (a wait asleep on a futex costs none): how fast "
         "each side would go on a core of its own, whatever else ran meanwhile. Sender: `send`; receiver: `receive`, "
         "the busiest when there are several. Bound/memcpy: the slower side against memcpy, the ratio the channel "
         "would reach with both sides on separate cores and perfect overlap.\n\n"
      << cpu;
}

}  // namespace wsync::bench
