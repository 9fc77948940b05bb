// `wsync-bench gpu`: the GPUs, the measurements and their report.
#include <iostream>

#include <wsync/bus/channel/nccl/nccl_channel.hpp>

#include "gpu.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

std::string ms(double value) { return fixed(value, value < 10 ? 2 : 1); }
std::string spread(const Summary& t) { return ms(t.median) + " (" + ms(t.min) + "-" + ms(t.max) + ")"; }
std::string gbps(const Summary& t, std::uint64_t bytes) { return fixed(gigabytesPerSecond(t, bytes), 1); }
std::string gigabytes(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / 1e9, 2) + " GB"; }
std::string gib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / kGiB, 2) + " GiB"; }
std::string mibOrGib(std::uint64_t bytes) {
  const double value = static_cast<double>(bytes);
  return value >= kGiB ? gib(bytes) : fixed(value / kMiB, value < 10 * kMiB ? 2 : 0) + " MiB";
}
std::string devices(const GpuMeasurement& m) {
  std::string text;
  for (std::size_t rank = 0; rank < m.devices.size(); ++rank) {
    text += (rank == 0 ? "" : rank == 1 ? " -> " : ",") + std::to_string(m.devices[rank]);
  }
  return text;
}
std::string digests(const GpuMeasurement& m) {
  const std::string count = std::to_string(m.digestsEqual) + "/" + std::to_string(m.digestsCompared);
  return m.digestsAllEqual() ? "all " + count : "**" + count + "**";
}
std::string hostCheck(const GpuMeasurement& m) { return m.hostCheck == "differs" ? "**differs**" : m.hostCheck; }
double ratioGoal(const GpuMeasurement& m) {
  return m.channel == "nccl" ? kMaxNcclToBroadcastRatio : kMaxIpcToMemcpyRatio;
}
bool ratioMet(const GpuMeasurement& m) { return m.ratio() > 0 && m.ratio() <= ratioGoal(m); }
double extraBuckets(const GpuMeasurement& m, const DeviceMemoryUse& use) {
  return m.bucketBytes > 0 ? static_cast<double>(use.extraBytes()) / static_cast<double>(m.bucketBytes) : 0;
}
std::uint64_t beyondChannel(const DeviceMemoryUse& use) {
  const std::uint64_t own = use.channelBuffers + use.channelTables;
  return use.extraBytes() > own ? use.extraBytes() - own : 0;
}
// "3 calls of up to 20.00 GiB": how the baseline moved the model when GPU memory was short for a second copy.
std::string baselineShape(const GpuMeasurement& m) {
  if (m.baselineCalls <= 1) return "one call";
  return std::to_string(m.baselineCalls) + " calls of up to " + gib(m.baselineChunkBytes);
}

Json toJson(const Summary& t, std::uint64_t bytes) {
  Json json = toJson(t, "ms", {"median", "min", "max"});
  json["median_gbps"] = gigabytesPerSecond(t, bytes);
  return json;
}

Json toJson(const GpuMeasurement& m) {
  Json json{{"channel", m.channel},     {"model", m.model},         {"tensors", m.tensors},
            {"bytes", m.modelBytes},    {"bucket_bytes", m.bucketBytes}, {"buckets", m.buckets},
            {"receivers", m.receivers}, {"devices", m.devices},     {"allocation", m.allocation},
            {"sender_allocations", m.senderAllocations}, {"skipped", m.skipped.empty() ? Json() : Json(m.skipped)}};
  if (!m.skipped.empty()) return json;
  json["channel_round"] = toJson(m.channelRound, m.modelBytes);
  if (m.channel == "nccl") json["sender_returned"] = toJson(m.senderReturn, m.modelBytes);
  json["baseline"] = {{"kind", m.channel == "nccl" ? "ncclBroadcast" : "cudaMemcpy"},
                      {"skipped", m.baselineSkipped.empty() ? Json() : Json(m.baselineSkipped)},
                      {"buffer_bytes", m.baselineChunkBytes}, {"calls", m.baselineCalls},
                      {"round", toJson(m.baselineRound, m.modelBytes)},
                      {"gpu_events", toJson(m.baselineGpu, m.modelBytes)}};
  json.update(Json{{"ratio", m.ratio()}, {"ratio_goal", ratioGoal(m)}, {"goal_met", ratioMet(m)},
                   {"digests_compared", m.digestsCompared}, {"digests_equal", m.digestsEqual},
                   {"host_check", m.hostCheck}});
  Json& memory = json["memory"] = Json::array();
  for (const DeviceMemoryUse& use : m.memory) {
    memory.push_back({{"device", use.device}, {"side", use.side}, {"tensor_bytes", use.tensorBytes},
                      {"free_before_open", use.freeBeforeOpen}, {"min_free", use.minFree},
                      {"extra_bytes", use.extraBytes()}, {"extra_buckets", extraBuckets(m, use)},
                      {"channel_buffer_bytes", use.channelBuffers}, {"channel_table_bytes", use.channelTables},
                      {"raw_communicator_bytes", use.rawCommunicator}});
  }
  json["max_late_start_ms"] = m.maxLateStartMs;
  if (m.channel == "cuda_ipc") {
    json.update(Json{{"handles_after_first", m.handlesAfterFirst}, {"handles_at_end", m.handlesAtEnd},
                     {"export_generation", m.exportGeneration}});
  }
  return json;
}

Json toJson(const GpuInfo& g) {
  Json devicesJson = Json::array();
  for (const GpuDeviceInfo& d : g.devices) {
    devicesJson.push_back({{"index", d.index}, {"name", d.name}, {"memory_bytes", d.memoryBytes},
                           {"pci_bus_id", d.pciBusId}, {"compute_capability", d.capability},
                           {"multiprocessors", d.multiprocessors}});
  }
  return {{"host", g.hostName}, {"visible", g.deviceCount}, {"driver_cuda_version", g.driverVersion},
          {"runtime_version", g.runtimeVersion}, {"nccl_version", g.ncclVersion},
          {"nccl_environment", g.ncclEnvironment}, {"devices", devicesJson}, {"peer_access", g.peerAccess}};
}

void notes(std::ostream& out, const std::vector<GpuMeasurement>& rows) {
  for (const GpuMeasurement& m : rows) {
    const std::string name = "- " + m.channel + " " + m.model;
    if (!m.skipped.empty()) {
      out << name << ": skipped, " << m.skipped << "\n";
    } else if (!m.baselineSkipped.empty()) {
      out << name << ": no baseline, " << m.baselineSkipped << "\n";
    } else if (m.baselineCalls > 1) {
      out << name << ": GPU memory was short for a second copy of the model, so the baseline moved it in "
          << baselineShape(m) << ", back to back on one stream\n";
    }
    if (m.skipped.empty() && m.maxLateStartMs * 1000 > static_cast<double>(kLateStartWarning.count())) {
      out << name << " (" << mibOrGib(m.bucketBytes) << "): a rank began a round up to " << ms(m.maxLateStartMs)
          << " ms after the common start\n";
    }
  }
}

std::string baselineTimes(const GpuMeasurement& m) {
  return spread(m.baselineRound) + (m.baselineCalls > 1 ? " (" + baselineShape(m) + ")" : "");
}

void ncclSection(std::ostream& out, const std::vector<GpuMeasurement>& rows) {
  Table table("lrrrrlrrrrrlrll", {"model", "tensors", "size", "bucket", "buckets", "GPUs", "channel ms", "channel GB/s",
                                  "broadcast ms", "broadcast GB/s", "channel/broadcast",
                                  "goal (<= " + ratio(kMaxNcclToBroadcastRatio) + ")", "sender returned ms",
                                  "digests equal", "host check"});
  Table memory("lrrlrrrlrrr", {"model", "bucket", "GPU", "side", "tensors took", "extra (peak)", "in buckets",
                               "goal (<= " + fixed(kMaxNcclExtraBuckets, 0) + " buckets)",
                               "channel's own buffers + tables", "beyond them", "raw communicator"});
  for (const GpuMeasurement& m : rows) {
    if (!m.skipped.empty()) {
      table.row({m.model, std::to_string(m.tensors), gigabytes(m.modelBytes), mibOrGib(m.bucketBytes), "", devices(m),
                 "skipped: " + m.skipped, "", "", "", "", "", "", "", ""});
      continue;
    }
    const bool base = m.baselineSkipped.empty();
    table.row({m.model, std::to_string(m.tensors), gigabytes(m.modelBytes), mibOrGib(m.bucketBytes),
               std::to_string(m.buckets), devices(m), spread(m.channelRound), gbps(m.channelRound, m.modelBytes),
               base ? baselineTimes(m) : "none", base ? gbps(m.baselineRound, m.modelBytes) : "",
               base ? ratio(m.ratio()) : "", base ? verdict(ratioMet(m)) : "", ms(m.senderReturn.median), digests(m),
               hostCheck(m)});
    for (const DeviceMemoryUse& use : m.memory) {
      memory.row({m.model, mibOrGib(m.bucketBytes), std::to_string(use.device), use.side, gib(use.tensorBytes),
                  mibOrGib(use.extraBytes()), fixed(extraBuckets(m, use), 2),
                  verdict(extraBuckets(m, use) <= kMaxNcclExtraBuckets),
                  mibOrGib(use.channelBuffers) + " + " + mibOrGib(use.channelTables), mibOrGib(beyondChannel(use)),
                  mibOrGib(use.rawCommunicator)});
    }
  }
  out << "## nccl: sender on GPU 0, receivers on the other GPUs\n\n"
      << "Round: every rank starts at one instant (CLOCK_MONOTONIC, spun on); the round ends when the last rank's "
         "`send`/`receive` returned. Broadcast: one `ncclBroadcast` of the model's bytes from one contiguous buffer, "
         "through a blocking communicator of the same ranks, timed the same way. Median (min-max) of the timed rounds, "
         "ms; GB/s is model bytes (10^9) over the median. Sender returned: until the sender's `send` returned. "
         "Digests: every receiver's against the sender's, every channel round.\n\n"
      << table << "### nccl: GPU memory beyond the tensors\n\n"
      << "Extra: the device's free memory before the channel opened minus the least seen while it was open (sampled "
         "every "
      << kMemorySampleInterval.count()
      << " ms and after every round): the channel's buffers and tables, its communicator and whatever CUDA allocated "
         "for it. Raw communicator: what the baseline's took, for comparison.\n\n"
      << memory;
}

void ipcSection(std::ostream& out, const std::vector<GpuMeasurement>& rows) {
  Table table("lrrlrrrrrrrlllll", {"model", "tensors", "size", "GPUs", "exported allocations", "channel ms",
                                   "channel GB/s", "memcpy ms", "memcpy GPU ms", "memcpy GB/s", "channel/memcpy",
                                   "goal (<= " + ratio(kMaxIpcToMemcpyRatio) + ")", "handles after round 1 / at end",
                                   "export generation", "digests equal", "host check"});
  Table memory("lrlrrr", {"model", "GPU", "side", "tensors took", "extra (peak)", "channel's own tables"});
  for (const GpuMeasurement& m : rows) {
    if (!m.skipped.empty()) {
      table.row({m.model, std::to_string(m.tensors), gigabytes(m.modelBytes), devices(m), "skipped: " + m.skipped, "",
                 "", "", "", "", "", "", "", "", "", ""});
      continue;
    }
    const bool base = m.baselineSkipped.empty();
    const bool fixedHandles = m.handlesAfterFirst == m.handlesAtEnd && m.exportGeneration == 1;
    table.row({m.model, std::to_string(m.tensors), gigabytes(m.modelBytes), devices(m),
               std::to_string(m.senderAllocations), spread(m.channelRound), gbps(m.channelRound, m.modelBytes),
               base ? baselineTimes(m) : "none", base ? ms(m.baselineGpu.median) : "",
               base ? gbps(m.baselineRound, m.modelBytes) : "", base ? ratio(m.ratio()) : "",
               base ? verdict(ratioMet(m)) : "",
               std::to_string(m.handlesAfterFirst) + " / " + std::to_string(m.handlesAtEnd) +
                   (fixedHandles ? "" : " **(changed)**"),
               std::to_string(m.exportGeneration), digests(m), hostCheck(m)});
    for (const DeviceMemoryUse& use : m.memory) {
      memory.row({m.model, std::to_string(use.device), use.side, gib(use.tensorBytes), mibOrGib(use.extraBytes()),
                  mibOrGib(use.channelBuffers + use.channelTables)});
    }
  }
  out << "## cuda_ipc: sender and receivers in separate processes\n\n"
      << "Round: the sender's `send`, from its call to its return (once every receiver has copied and the digests "
         "agree). memcpy: one `cudaMemcpyAsync` device to device (`cudaMemcpyPeerAsync` across GPUs) of the model's "
         "bytes between two contiguous buffers in the sender's process, wall clock, and between CUDA events. Median "
         "(min-max), ms. Handles: `openedHandles()` of the receivers, fixed after the first round when nothing moved; "
         "export generation 1 when the sender wrote its tables once.\n\n"
      << table << "### cuda_ipc: GPU memory beyond the tensors\n\n"
      << "Per GPU, device-wide (the ranks on one GPU share it): free memory before the first rank opened the channel "
         "minus the least seen while it was open. Channel's own: `memory()`, summed over the ranks.\n\n"
      << memory;
}

}  // namespace

void runGpuBenchmark(const GpuBenchConfig& c, Report& report) {
  prepareGpuEnvironment();  // before anything loads NCCL or starts a rank
  const GpuInfo g = describeGpus();
  const GpuResults r = measureGpus(c, g, std::cerr);
  report.json["gpus"] = toJson(g);
  report.json["command_line"] = c.commandLine;
  report.json["parameters"].update(Json{{"channels", c.channels}, {"models", c.models}, {"receivers", c.receivers},
                                        {"ipc_devices", c.ipcDevices}, {"bucket_mib", c.bucketMiB},
                                        {"nccl_buffers", bus::gpu::kNcclDefaultBuffers},
                                        {"plan_alignment", kGpuPlanAlignment}, {"warmup_rounds", c.warmup},
                                        {"repetitions", c.repetitions}, {"allocation", c.allocation},
                                        {"host_check", c.hostCheck}});
  for (const auto& [key, rows] : {std::pair{"nccl", &r.nccl}, std::pair{"cuda_ipc", &r.cudaIpc}}) {
    Json& list = report.json[key] = Json::array();
    for (const GpuMeasurement& m : *rows) list.push_back(toJson(m));
  }
  report.json["notes"] = r.notes;

  std::ostringstream& out = report.markdown;
  out << "## GPUs\n\n| | |\n|---|---|\n| Host | " << g.hostName << " |\n| Command | `" << c.commandLine
      << "` |\n| GPUs | " << g.deviceCount << " visible";
  for (const GpuDeviceInfo& d : g.devices) {
    out << "<br>" << d.index << ": " << d.name << ", " << gib(d.memoryBytes) << ", compute " << d.capability << ", "
        << d.multiprocessors << " SMs, PCI " << d.pciBusId;
  }
  out << " |\n";
  if (g.deviceCount > 1) {
    out << "| Peer access | ";
    for (std::size_t from = 0; from < g.peerAccess.size(); ++from) {
      out << (from == 0 ? "" : "; ") << from << " ->";
      for (std::size_t to = 0; to < g.peerAccess[from].size(); ++to) {
        if (to != from) out << " " << to << (g.peerAccess[from][to] != 0 ? " yes" : " no");
      }
    }
    out << " |\n";
  }
  out << "| CUDA | driver supports " << g.driverVersion << ", runtime " << g.runtimeVersion
      << " (linked statically) |\n"
      << "| NCCL | " << g.ncclVersion << " (libnccl.so.2, loaded at run time) |\n| NCCL environment | ";
  for (std::size_t i = 0; i < g.ncclEnvironment.size(); ++i) {
    out << (i == 0 ? "" : ", ") << "`" << g.ncclEnvironment[i] << "`";
  }
  out << " (NCCL_NVLS_ENABLE=0 is set by the benchmark unless given; every rank inherits these) |\n\n"
      << "## Parameters\n\n- Rounds: " << c.warmup << " warm-up + " << c.repetitions
      << " timed per measurement; the channel and its baseline take turns (the channel first in even rounds), each "
         "after the sender wrote a new version of every tensor (untimed)\n"
      << "- Tensors: "
      << (c.allocation == "torch" ? "carved from segments as PyTorch's caching allocator makes them"
                                  : "one cudaMalloc per tensor")
      << " (`--allocation " << c.allocation << "`), written on the device by a kernel\n- nccl: buckets of";
  for (std::size_t i = 0; i < c.bucketMiB.size(); ++i) out << (i == 0 ? " " : ", ") << c.bucketMiB[i] << " MiB";
  out << ", " << bus::gpu::kNcclDefaultBuffers << " buffers, plan alignment " << kGpuPlanAlignment << " bytes\n"
      << "- Host check: "
      << (c.hostCheck ? "the sender's digest of the first channel round against the host's reference"
                      : "off (`--no-host-check`)")
      << "\n\n";
  if (!r.nccl.empty()) ncclSection(out, r.nccl);
  if (!r.cudaIpc.empty()) ipcSection(out, r.cudaIpc);
  std::ostringstream list;
  for (const std::string& note : r.notes) list << "- " << note << "\n";
  notes(list, r.nccl);
  notes(list, r.cudaIpc);
  if (!list.str().empty()) out << "## Notes\n\n" << list.str() << "\n";
}

}  // namespace wsync::bench
