#include "shm_report.hpp"

#include <algorithm>
#include <sstream>

#include "report_format.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string gbps(double value) { return fixed(value, 2); }
std::string spread(const Throughput& t) {
  return gbps(t.medianGBps) + " (" + gbps(t.minGBps) + "-" + gbps(t.maxGBps) + ")";
}
std::string mib(double bytes) { return fixed(bytes / kMiB, bytes < 10 * kMiB ? 2 : 0) + " MiB"; }
std::string geometry(const ShmMeasurement& m) {
  return fixed(static_cast<double>(m.bucketBytes) / kMiB, 0) + " MiB x " + std::to_string(m.buffers);
}
std::string digests(const ShmMeasurement& m) {
  const std::string count = std::to_string(m.digestsEqual) + "/" + std::to_string(m.digestsCompared);
  return m.digestsAllEqual() ? "all " + count : "**" + count + "**";
}
bool goalMet(const ShmMeasurement& m) { return m.ratio() >= kMinChannelToMemcpyRatio; }
std::string percent(double share) { return fixed(share * 100, 0) + "%"; }

void memorySection(std::ostringstream& out, const ShmBenchReport& report) {
  const ShmResults& r = report.results;
  out << "Memory available at the start: " << fixed(static_cast<double>(r.availableMemoryBytes) / kMiB / 1024, 1)
      << " GiB; transparent huge pages: " << r.hugePages << ". Other processes used " << percent(r.othersCpuShare)
      << " of the machine's CPU time during the run (steal included; the tables give it per measurement).";
  if (report.machine.onlineCpus <= 2) {
    out << " **" << report.machine.onlineCpus
        << " vCPUs**: sender and receiver each have a core only with one receiver; with 3 and 8 receivers all "
           "processes share 2 cores, so the fan-out figures measure CPU sharing as much as the channel.";
  }
  out << "\n\n";
}

void parameterSection(std::ostringstream& out, const ShmBenchReport& report) {
  const ShmBenchConfig& c = report.config;
  out << "## Parameters\n\n"
      << "- Mode: " << (c.quick ? "`--quick` (a demonstration; too few samples for conclusions)" : "full") << "\n"
      << "- Sender: the benchmark process, which owns the arena (e.g. `" << report.results.arenaExample
      << "` in /dev/shm); receivers: separate processes (`agent-shm-receive`)\n"
      << "- Geometry: buckets of " << c.bucketMiB << " MiB, " << c.buffers << " buffers; plan alignment "
      << kShmPlanAlignment << " bytes\n"
      << "- Repetitions: " << c.repetitions << " timed (+" << kShmWarmupRounds
      << " warm-up) per path and measurement; the three paths (channel, memcpy, memcpy+XXH3) rotate every round\n";
  if (!c.sweepBucketMiB.empty() && !c.sweepBuffers.empty()) {
    out << "- Geometry comparison: " << c.sweepRepetitions << " timed (+" << kShmWarmupRounds
        << " warm-up) per path and geometry\n";
  }
  if (c.waitForQuiet) {
    std::size_t busy = 0;
    for (const auto* list : {&report.results.single, &report.results.fanout, &report.results.sweep}) {
      for (const ShmMeasurement& m : *list) busy += m.busyRounds;
    }
    out << "- `--wait-for-quiet`: every round (warm-up included) started once the machine's CPUs had been at least "
        << fixed((1 - kQuietMaxBusyShare) * 100, 0) << "% idle for " << kQuietWindow.count() << " ms; " << busy
        << " round(s) started without that after waiting " << kQuietWaitLimit.count() / 1000 << " s\n";
  }
  out << "- Content: model_catalog's deterministic content, moved to its next version (untimed) before every "
         "repetition of every path, so a receiver's digest can only match with this transfer's bytes\n"
      << "- Wall time of the run: " << fixed(report.wallSeconds, 1) << " s\n\n";
}

void singleSection(std::ostringstream& out, const ShmBenchReport& report) {
  out << "## One sender process, one receiver process (GB/s)\n\n"
      << "Channel: from the sender's call to `send` until the receiver's `receive` returned (its time stamp), model "
         "bytes over that time. memcpy: the same tensors copied one by one in the sender's process into a second "
         "copy of the model. Median (min-max) of the timed repetitions.\n\n"
      << "| model | tensors | size | buckets | channel | memcpy | channel/memcpy | goal (>= "
      << fixed(kMinChannelToMemcpyRatio, 1) << "x) | memcpy+XXH3 | sender alone | digests equal | others' CPU |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|\n";
  for (const ShmMeasurement& m : report.results.single) {
    out << "| " << m.model << " | " << m.tensors << " | " << mib(static_cast<double>(m.modelBytes)) << " | "
        << m.buckets << " | " << spread(m.channel) << " | " << spread(m.memcpy) << " | " << ratio(m.ratio())
        << " | " << verdict(goalMet(m)) << " | " << gbps(m.copyDigest.medianGBps) << " | "
        << gbps(m.sender.medianGBps) << " | " << digests(m) << " | " << percent(m.othersCpuShare) << " |\n";
  }
  out << "\nmemcpy+XXH3: memcpy of each tensor, then XXH3-128 over the copy, in one process: the plain way to move "
         "and check the bytes, for reference (the channel copies and digests 16 KiB slices, so the digest reads from "
         "L1, and its receivers stream their copies past the caches). Sender alone: model bytes over the time until `send` returned (the last bucket "
         "published). Digests: every receiver's digest and byte count against the sender's, for every transfer "
         "(warm-up included). Others' CPU: the share of the machine's CPU time that other processes used meanwhile.\n\n";
}

void fanoutSection(std::ostringstream& out, const ShmBenchReport& report) {
  if (report.results.fanout.empty()) return;
  out << "## One sender process, N receiver processes (GB/s)\n\n"
      << "Timed until the last receiver finished. Per receiver: model bytes over that time (what each receiver got); "
         "aggregate: N times that.\n\n"
      << "| model | receivers | per receiver | aggregate | per receiver/memcpy | memcpy | sender alone | digests equal "
         "| others' CPU |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---|---:|\n";
  for (const ShmMeasurement& m : report.results.fanout) {
    out << "| " << m.model << " | " << m.receivers << " | ";
    if (!m.skipped.empty()) {
      out << "skipped: " << m.skipped << " | | | | | | |\n";
      continue;
    }
    out << spread(m.channel) << " | " << gbps(m.aggregateGBps()) << " | " << ratio(m.ratio()) << " | "
        << gbps(m.memcpy.medianGBps) << " | " << gbps(m.sender.medianGBps) << " | " << digests(m) << " | "
        << percent(m.othersCpuShare) << " |\n";
  }
  out << "\n";
}

void sweepSection(std::ostringstream& out, const ShmBenchReport& report) {
  if (report.results.sweep.empty()) return;
  out << "## Bucket size and buffer count, one receiver (GB/s)\n\n"
      << "| model | bucket x buffers | buckets | channel | memcpy | channel/memcpy | sender alone | digests equal "
         "| others' CPU |\n"
      << "|---|---|---:|---:|---:|---:|---:|---|---:|\n";
  for (const ShmMeasurement& m : report.results.sweep) {
    out << "| " << m.model << " | " << geometry(m) << " | " << m.buckets << " | " << spread(m.channel) << " | "
        << gbps(m.memcpy.medianGBps) << " | " << ratio(m.ratio()) << " | " << gbps(m.sender.medianGBps) << " | "
        << digests(m) << " | " << percent(m.othersCpuShare) << " |\n";
  }
  out << "\n";
}

double cpuBoundRatio(const ShmMeasurement& m) {
  const double slower = std::min(m.senderCpu.medianGBps, m.receiverCpu.medianGBps);
  return m.memcpyCpu.medianGBps > 0 ? slower / m.memcpyCpu.medianGBps : 0;
}

void cpuSection(std::ostringstream& out, const ShmBenchReport& report) {
  out << "## Work per side (GB per CPU-second)\n\n"
      << "Model bytes over the CPU time of the thread doing the work (a wait asleep on a futex costs none): how fast "
         "each side would go on a core of its own, whatever else ran meanwhile. Sender: `send` (copy in, XXH3 of the "
         "source); receiver: `receive` (streaming copy out, XXH3 of the bucket slice just copied), the busiest receiver when there are several. "
         "Bound/memcpy: the slower side against memcpy, the ratio the channel would reach with both sides on "
         "separate cores and perfect overlap.\n\n"
      << "| model | receivers | bucket x buffers | sender | receiver | memcpy | memcpy+XXH3 | bound/memcpy |\n"
      << "|---|---:|---|---:|---:|---:|---:|---:|\n";
  const auto row = [&out](const ShmMeasurement& m) {
    if (!m.skipped.empty()) return;
    out << "| " << m.model << " | " << m.receivers << " | " << geometry(m) << " | " << gbps(m.senderCpu.medianGBps)
        << " | " << gbps(m.receiverCpu.medianGBps) << " | " << gbps(m.memcpyCpu.medianGBps) << " | "
        << gbps(m.copyDigestCpu.medianGBps) << " | " << ratio(cpuBoundRatio(m)) << " |\n";
  };
  for (const ShmMeasurement& m : report.results.single) row(m);
  for (const ShmMeasurement& m : report.results.fanout) row(m);
  for (const ShmMeasurement& m : report.results.sweep) row(m);
  out << "\n";
}

void methodSection(std::ostringstream& out) {
  out << "## Method\n\n"
      << "- Source, baseline copy and every receiver's destination are one anonymous mapping per copy of the model, "
         "tensors on 64-byte boundaries, every page written before anything is timed; the arena's pages are faulted "
         "in by the warm-up transfers.\n"
      << "- Receivers wait in `receive` (asleep on the arena's futex) when a transfer starts, as a worker would; "
         "each reports its completion time (CLOCK_MONOTONIC, shared by all processes) on a pipe, so the pipe's "
         "wake-up is not timed. Process start-up and the filling of source tensors are not timed.\n"
      << "- GB/s is 10^9 bytes per second of model bytes (alignment padding not counted).\n";
}

std::string jsonThroughput(const Throughput& t) {
  return "{\"samples\": " + std::to_string(t.samples) + ", \"median_gbps\": " + fixed(t.medianGBps, 4) +
         ", \"min_gbps\": " + fixed(t.minGBps, 4) + ", \"max_gbps\": " + fixed(t.maxGBps, 4) + "}";
}

std::string jsonMeasurement(const ShmMeasurement& m) {
  std::ostringstream out;
  out << "{\"model\": " << jsonString(m.model) << ", \"tensors\": " << m.tensors << ", \"bytes\": " << m.modelBytes
      << ", \"receivers\": " << m.receivers << ", \"bucket_bytes\": " << m.bucketBytes << ", \"buffers\": "
      << m.buffers << ", \"buckets\": " << m.buckets
      << ", \"skipped\": " << (m.skipped.empty() ? "null" : jsonString(m.skipped));
  if (m.skipped.empty()) {
    out << ", \"channel\": " << jsonThroughput(m.channel) << ", \"sender\": " << jsonThroughput(m.sender)
        << ", \"memcpy\": " << jsonThroughput(m.memcpy) << ", \"memcpy_xxh3\": " << jsonThroughput(m.copyDigest)
        << ", \"cpu\": {\"sender\": " << jsonThroughput(m.senderCpu) << ", \"receiver\": "
        << jsonThroughput(m.receiverCpu) << ", \"memcpy\": " << jsonThroughput(m.memcpyCpu)
        << ", \"memcpy_xxh3\": " << jsonThroughput(m.copyDigestCpu) << ", \"bound_ratio\": "
        << fixed(cpuBoundRatio(m), 4) << "}"
        << ", \"ratio\": " << fixed(m.ratio(), 4) << ", \"aggregate_gbps\": " << fixed(m.aggregateGBps(), 4)
        << ", \"digests_compared\": " << m.digestsCompared << ", \"digests_equal\": " << m.digestsEqual
        << ", \"goal_met\": " << jsonBool(goalMet(m)) << ", \"others_cpu_share\": " << fixed(m.othersCpuShare, 4)
        << ", \"busy_rounds\": " << m.busyRounds;
  }
  out << "}";
  return out.str();
}

void jsonList(std::ostringstream& out, const char* key, const std::vector<ShmMeasurement>& list, bool last) {
  out << "  \"" << key << "\": [";
  for (std::size_t i = 0; i < list.size(); ++i) out << (i == 0 ? "\n    " : ",\n    ") << jsonMeasurement(list[i]);
  out << (list.empty() ? "]" : "\n  ]") << (last ? "\n" : ",\n");
}

template <typename T>
std::string jsonArray(const std::vector<T>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i == 0 ? "" : ", ") << values[i];
  out << "]";
  return out.str();
}

}  // namespace

std::string renderShmMarkdown(const ShmBenchReport& report) {
  std::ostringstream out;
  out << "# wsync-bench shm: " << report.machine.dateUtc << "\n\n";
  machineSection(out, report.machine);
  memorySection(out, report);
  parameterSection(out, report);
  singleSection(out, report);
  fanoutSection(out, report);
  sweepSection(out, report);
  cpuSection(out, report);
  methodSection(out);
  return out.str();
}

std::string renderShmJson(const ShmBenchReport& report) {
  const ShmBenchConfig& c = report.config;
  std::vector<std::string> models;
  for (const std::string& model : c.models) models.push_back(jsonString(model));
  std::ostringstream out;
  out << "{\n  \"mode\": \"shm\",\n"
      << "  \"machine\": " << machineJson(report.machine) << ",\n"
      << "  \"memory\": {\"available_bytes\": " << report.results.availableMemoryBytes
      << ", \"transparent_huge_pages\": " << jsonString(report.results.hugePages) << "},\n"
      << "  \"others_cpu_share\": " << fixed(report.results.othersCpuShare, 4) << ",\n"
      << "  \"parameters\": {\"quick\": " << jsonBool(c.quick) << ", \"models\": " << jsonArray(models)
      << ", \"fanout_receivers\": " << jsonArray(c.fanoutReceivers) << ", \"bucket_bytes\": "
      << c.bucketMiB * 1024 * 1024 << ", \"buffers\": " << c.buffers << ", \"plan_alignment\": " << kShmPlanAlignment
      << ", \"repetitions\": " << c.repetitions << ", \"warmup_rounds\": " << kShmWarmupRounds
      << ", \"sweep_bucket_mib\": " << jsonArray(c.sweepBucketMiB) << ", \"sweep_buffers\": "
      << jsonArray(c.sweepBuffers) << ", \"sweep_repetitions\": " << c.sweepRepetitions
      << ", \"wait_for_quiet\": " << jsonBool(c.waitForQuiet)
      << ", \"min_ratio_goal\": " << fixed(kMinChannelToMemcpyRatio, 2) << "},\n";
  jsonList(out, "single", report.results.single, false);
  jsonList(out, "fanout", report.results.fanout, false);
  jsonList(out, "sweep", report.results.sweep, false);
  out << "  \"wall_seconds\": " << fixed(report.wallSeconds, 2) << "\n}\n";
  return out.str();
}

}  // namespace wsync::bench
