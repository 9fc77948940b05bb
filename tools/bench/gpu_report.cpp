#include "gpu_report.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

#include <wsync/bus/channel/nccl/nccl_channel.hpp>

#include "report_format.hpp"

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

std::string ms(double value) { return fixed(value, value < 10 ? 2 : 1); }
std::string spread(const RoundTimes& t) { return ms(t.medianMs) + " (" + ms(t.minMs) + "-" + ms(t.maxMs) + ")"; }
std::string gbps(const RoundTimes& t, std::uint64_t bytes) { return fixed(t.gigabytesPerSecond(bytes), 1); }
std::string gigabytes(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / 1e9, 2) + " GB"; }
std::string gib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / kGiB, 2) + " GiB"; }
std::string mibOrGib(std::uint64_t bytes) {
  const double value = static_cast<double>(bytes);
  return value >= kGiB ? gib(bytes) : fixed(value / kMiB, value < 10 * kMiB ? 2 : 0) + " MiB";
}
std::string bucket(const GpuMeasurement& m) { return mibOrGib(m.bucketBytes); }
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

bool ncclRatioMet(const GpuMeasurement& m) { return m.ratio() > 0 && m.ratio() <= kMaxNcclToBroadcastRatio; }
bool ipcRatioMet(const GpuMeasurement& m) { return m.ratio() > 0 && m.ratio() <= kMaxIpcToMemcpyRatio; }
double extraBuckets(const GpuMeasurement& m, const DeviceMemoryUse& use) {
  return m.bucketBytes > 0 ? static_cast<double>(use.extraBytes()) / static_cast<double>(m.bucketBytes) : 0;
}
std::uint64_t beyondChannel(const DeviceMemoryUse& use) {
  const std::uint64_t own = use.channelBuffers + use.channelTables;
  return use.extraBytes() > own ? use.extraBytes() - own : 0;
}
bool ncclMemoryMet(const GpuMeasurement& m, const DeviceMemoryUse& use) {
  return extraBuckets(m, use) <= kMaxNcclExtraBuckets;
}

// "1 x 14.2 GB" or "3 x 20.00 GiB": how the baseline moved the model.
std::string baselineShape(const GpuMeasurement& m) {
  if (m.baselineCalls <= 1) return "one call";
  return std::to_string(m.baselineCalls) + " calls of up to " + gib(m.baselineChunkBytes);
}

void gpuSection(std::ostringstream& out, const GpuBenchReport& report) {
  const GpuInfo& g = report.gpus;
  out << "## GPUs\n\n"
      << "| | |\n|---|---|\n"
      << "| Host | " << g.hostName << " |\n"
      << "| Command | `" << report.config.commandLine << "` |\n"
      << "| GPUs | " << g.deviceCount << " visible";
  for (const GpuDeviceInfo& device : g.devices) {
    out << "<br>" << device.index << ": " << device.name << ", " << gib(device.memoryBytes) << ", compute "
        << device.capability << ", " << device.multiprocessors << " SMs, PCI " << device.pciBusId;
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
      << "| NCCL | " << g.ncclVersion << " (libnccl.so.2, loaded at run time) |\n"
      << "| NCCL environment | ";
  for (std::size_t i = 0; i < g.ncclEnvironment.size(); ++i) {
    out << (i == 0 ? "" : ", ") << "`" << g.ncclEnvironment[i] << "`";
  }
  out << " (NCCL_NVLS_ENABLE=0 is set by the benchmark unless given; every rank inherits these) |\n\n";
}

void parameterSection(std::ostringstream& out, const GpuBenchReport& report) {
  const GpuBenchConfig& c = report.config;
  out << "## Parameters\n\n"
      << "- Mode: " << (c.quick ? "`--quick` (a demonstration; too few samples for conclusions)" : "full") << "\n"
      << "- Rounds: " << c.warmup << " warm-up + " << c.repetitions
      << " timed per measurement; in each round the channel and its baseline take turns (the channel first in even "
         "rounds), each after the sender wrote a new version of every tensor (untimed)\n"
      << "- Tensors: " << (c.allocation == "torch" ? "carved from segments as PyTorch's caching allocator makes them"
                                                   : "one cudaMalloc per tensor")
      << " (`--allocation " << c.allocation << "`), written on the device by a kernel\n"
      << "- nccl: buckets of";
  for (std::size_t i = 0; i < c.bucketMiB.size(); ++i) out << (i == 0 ? " " : ", ") << c.bucketMiB[i] << " MiB";
  out << ", " << bus::gpu::kNcclDefaultBuffers << " buffers, plan alignment " << kGpuPlanAlignment << " bytes\n"
      << "- Host check: " << (c.hostCheck ? "the sender's digest of the first channel round against the host's "
                                            "reference (device_checksum.hpp over the content's formula)"
                                          : "off (`--no-host-check`)")
      << "\n"
      << "- Wall time of the run: " << fixed(report.wallSeconds, 1) << " s\n\n";
}

void notes(std::ostringstream& out, const std::vector<GpuMeasurement>& rows) {
  for (const GpuMeasurement& m : rows) {
    if (!m.skipped.empty()) out << "- " << m.channel << " " << m.model << ": skipped, " << m.skipped << "\n";
    if (m.skipped.empty() && !m.baselineSkipped.empty()) {
      out << "- " << m.channel << " " << m.model << ": no baseline, " << m.baselineSkipped << "\n";
    }
    if (m.skipped.empty() && m.baselineSkipped.empty() && m.baselineCalls > 1) {
      out << "- " << m.channel << " " << m.model << ": GPU memory was short for a second copy of the model, so the "
          << "baseline moved it in " << baselineShape(m) << ", back to back on one stream\n";
    }
    if (m.skipped.empty() && m.maxLateStartMs * 1000 > static_cast<double>(kLateStartWarning.count())) {
      out << "- " << m.channel << " " << m.model << " (" << bucket(m) << "): a rank began a round up to "
          << ms(m.maxLateStartMs) << " ms after the common start\n";
    }
  }
}

void ncclSection(std::ostringstream& out, const GpuBenchReport& report) {
  const auto& rows = report.results.nccl;
  if (rows.empty()) return;
  out << "## nccl: sender on GPU 0, receivers on the other GPUs\n\n"
      << "Round: every rank starts at one instant (CLOCK_MONOTONIC, spun on); the round ends when the last rank's "
         "`send`/`receive` returned (the receivers' copies and digests done). Broadcast: one `ncclBroadcast` of the "
         "model's bytes from one contiguous buffer, through a communicator of the same ranks made with "
         "`ncclCommInitRankConfig` (blocking), timed the same way. Median (min-max) of the timed rounds, ms; GB/s is "
         "model bytes (10^9) over the median.\n\n"
      << "| model | tensors | size | bucket | buckets | GPUs | channel ms | channel GB/s | broadcast ms | "
         "broadcast GB/s | channel/broadcast | goal (<= "
      << ratio(kMaxNcclToBroadcastRatio) << ") | sender returned ms | digests equal | host check |\n"
      << "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---|---|\n";
  for (const GpuMeasurement& m : rows) {
    out << "| " << m.model << " | " << m.tensors << " | " << gigabytes(m.modelBytes) << " | " << bucket(m) << " | ";
    if (!m.skipped.empty()) {
      out << " | " << devices(m) << " | skipped: " << m.skipped << " | | | | | | | | |\n";
      continue;
    }
    out << m.buckets << " | " << devices(m) << " | " << spread(m.channelRound) << " | "
        << gbps(m.channelRound, m.modelBytes) << " | ";
    if (m.baselineSkipped.empty()) {
      out << spread(m.baselineRound) << (m.baselineCalls > 1 ? " (" + baselineShape(m) + ")" : "") << " | "
          << gbps(m.baselineRound, m.modelBytes) << " | " << ratio(m.ratio()) << " | " << verdict(ncclRatioMet(m));
    } else {
      out << "none | | | ";
    }
    out << " | " << ms(m.senderReturn.medianMs) << " | " << digests(m) << " | " << hostCheck(m) << " |\n";
  }
  out << "\nSender returned: from the common start until the sender's `send` returned. Digests: every receiver's "
         "digest and byte count against the sender's, every channel round (warm-up included).\n\n"
      << "### nccl: GPU memory beyond the tensors\n\n"
      << "Extra: the device's free memory before the channel opened (after the tensors, the broadcast's buffer and "
         "its communicator) minus the least free memory seen while it was open (sampled every "
      << kMemorySampleInterval.count()
      << " ms and after every round): the channel's buffers and tables, its NCCL communicator and whatever CUDA "
         "allocated for it. Channel's own: `NcclChannel::memory()`; beyond them: the rest of the extra (mostly the "
         "communicator). Raw communicator: what the baseline's communicator took on that GPU once connected, for "
         "comparison.\n\n"
      << "| model | bucket | GPU | side | tensors took | extra (peak) | in buckets | goal (<= "
      << fixed(kMaxNcclExtraBuckets, 0)
      << " buckets) | channel's own buffers + tables | beyond them | raw communicator |\n"
      << "|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|\n";
  for (const GpuMeasurement& m : rows) {
    if (!m.skipped.empty()) continue;
    for (const DeviceMemoryUse& use : m.memory) {
      out << "| " << m.model << " | " << bucket(m) << " | " << use.device << " | " << use.side << " | "
          << gib(use.tensorBytes) << " | " << mibOrGib(use.extraBytes()) << " | " << fixed(extraBuckets(m, use), 2)
          << " | " << verdict(ncclMemoryMet(m, use)) << " | " << mibOrGib(use.channelBuffers) << " + "
          << mibOrGib(use.channelTables) << " | " << mibOrGib(beyondChannel(use)) << " | "
          << mibOrGib(use.rawCommunicator) << " |\n";
    }
  }
  out << "\n";
}

void ipcSection(std::ostringstream& out, const GpuBenchReport& report) {
  const auto& rows = report.results.cudaIpc;
  if (rows.empty()) return;
  out << "## cuda_ipc: sender and receivers in separate processes\n\n"
      << "Round: the sender's `send`, from its call to its return (it returns once every receiver has copied the "
         "tensors from the sender's memory and their digests agree). memcpy: one `cudaMemcpyAsync` device to "
         "device (`cudaMemcpyPeerAsync` across GPUs) of the model's bytes between two contiguous buffers in the "
         "sender's process, timed the same way (wall clock), and between CUDA events. Median (min-max), ms.\n\n"
      << "| model | tensors | size | GPUs | exported allocations | channel ms | channel GB/s | memcpy ms | memcpy GPU "
         "ms | memcpy GB/s | channel/memcpy | goal (<= "
      << ratio(kMaxIpcToMemcpyRatio) << ") | handles after round 1 / at end | export generation | digests equal "
         "| host check |\n"
      << "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|---|\n";
  for (const GpuMeasurement& m : rows) {
    out << "| " << m.model << " | " << m.tensors << " | " << gigabytes(m.modelBytes) << " | " << devices(m) << " | ";
    if (!m.skipped.empty()) {
      out << "skipped: " << m.skipped << " | | | | | | | | | | | |\n";
      continue;
    }
    out << m.senderAllocations << " | " << spread(m.channelRound) << " | " << gbps(m.channelRound, m.modelBytes)
        << " | ";
    if (m.baselineSkipped.empty()) {
      out << spread(m.baselineRound) << (m.baselineCalls > 1 ? " (" + baselineShape(m) + ")" : "") << " | "
          << ms(m.baselineGpu.medianMs) << " | " << gbps(m.baselineRound, m.modelBytes) << " | " << ratio(m.ratio())
          << " | " << verdict(ipcRatioMet(m));
    } else {
      out << "none | | | | ";
    }
    const bool fixedHandles = m.handlesAfterFirst == m.handlesAtEnd && m.exportGeneration == 1;
    out << " | " << m.handlesAfterFirst << " / " << m.handlesAtEnd << (fixedHandles ? "" : " **(changed)**") << " | "
        << m.exportGeneration << " | " << digests(m) << " | " << hostCheck(m) << " |\n";
  }
  out << "\nHandles: `CudaIpcChannel::openedHandles()` of the receivers (the most any had): fixed after the first "
         "round when nothing moved. Export generation: `exportGeneration()`, 1 when the sender wrote its tables "
         "once.\n\n"
      << "### cuda_ipc: GPU memory beyond the tensors\n\n"
      << "Per GPU, device-wide (the ranks on one GPU share it): free memory before the first rank opened the "
         "channel minus the least seen while it was open. Channel's own: `CudaIpcChannel::memory()`, summed over "
         "the ranks.\n\n"
      << "| model | GPU | side | tensors took | extra (peak) | channel's own tables |\n"
      << "|---|---:|---|---:|---:|---:|\n";
  for (const GpuMeasurement& m : rows) {
    if (!m.skipped.empty()) continue;
    for (const DeviceMemoryUse& use : m.memory) {
      out << "| " << m.model << " | " << use.device << " | " << use.side << " | " << gib(use.tensorBytes) << " | "
          << mibOrGib(use.extraBytes()) << " | " << mibOrGib(use.channelBuffers + use.channelTables) << " |\n";
    }
  }
  out << "\n";
}

void notesSection(std::ostringstream& out, const GpuBenchReport& report) {
  std::ostringstream list;
  for (const std::string& note : report.results.notes) list << "- " << note << "\n";
  notes(list, report.results.nccl);
  notes(list, report.results.cudaIpc);
  if (list.str().empty()) return;
  out << "## Notes\n\n" << list.str() << "\n";
}

void methodSection(std::ostringstream& out) {
  out << "## Method\n\n"
      << "- Ranks are this executable (`agent-gpu-rank`), one process per rank, started one after the other; the "
         "benchmark process makes the NCCL unique ids (the bootstrap root lives in it) and the cuda_ipc segment, and "
         "allocates no GPU memory itself.\n"
      << "- Every round: the sender writes a new version of every tensor (a kernel; every word changes), all ranks "
         "report ready, then the benchmark sends a start time 10 ms ahead; each rank spins on CLOCK_MONOTONIC until "
         "then and reports its own start and end, so no wake-up or pipe latency is timed.\n"
      << "- Digests are the GPU channels' device checksum (`wsync/bus/device_checksum.hpp`), computed by the "
         "channels while they copy.\n"
      << "- Every wait is bounded (gpu_config.hpp); a rank that dies or goes silent ends the run with its name, "
         "after the others are stopped.\n";
}

std::string jsonTimes(const RoundTimes& t, std::uint64_t bytes) {
  return "{\"samples\": " + std::to_string(t.samples) + ", \"median_ms\": " + fixed(t.medianMs, 4) +
         ", \"min_ms\": " + fixed(t.minMs, 4) + ", \"max_ms\": " + fixed(t.maxMs, 4) +
         ", \"median_gbps\": " + fixed(t.gigabytesPerSecond(bytes), 4) + "}";
}

std::string jsonMemory(const GpuMeasurement& m) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < m.memory.size(); ++i) {
    const DeviceMemoryUse& use = m.memory[i];
    out << (i == 0 ? "" : ", ") << "{\"device\": " << use.device << ", \"side\": " << jsonString(use.side)
        << ", \"tensor_bytes\": " << use.tensorBytes << ", \"free_before_open\": " << use.freeBeforeOpen
        << ", \"min_free\": " << use.minFree << ", \"extra_bytes\": " << use.extraBytes()
        << ", \"extra_buckets\": " << fixed(extraBuckets(m, use), 4) << ", \"channel_buffer_bytes\": "
        << use.channelBuffers << ", \"channel_table_bytes\": " << use.channelTables
        << ", \"raw_communicator_bytes\": " << use.rawCommunicator << "}";
  }
  out << "]";
  return out.str();
}

std::string jsonMeasurement(const GpuMeasurement& m) {
  std::ostringstream out;
  out << "{\"channel\": " << jsonString(m.channel) << ", \"model\": " << jsonString(m.model)
      << ", \"tensors\": " << m.tensors << ", \"bytes\": " << m.modelBytes << ", \"bucket_bytes\": " << m.bucketBytes
      << ", \"buckets\": " << m.buckets << ", \"receivers\": " << m.receivers << ", \"devices\": [";
  for (std::size_t i = 0; i < m.devices.size(); ++i) out << (i == 0 ? "" : ", ") << m.devices[i];
  out << "], \"allocation\": " << jsonString(m.allocation) << ", \"sender_allocations\": " << m.senderAllocations
      << ", \"skipped\": " << (m.skipped.empty() ? "null" : jsonString(m.skipped));
  if (m.skipped.empty()) {
    const bool met = m.channel == "nccl" ? ncclRatioMet(m) : ipcRatioMet(m);
    out << ", \"channel_round\": " << jsonTimes(m.channelRound, m.modelBytes);
    if (m.channel == "nccl") out << ", \"sender_returned\": " << jsonTimes(m.senderReturn, m.modelBytes);
    out << ", \"baseline\": {\"kind\": " << jsonString(m.channel == "nccl" ? "ncclBroadcast" : "cudaMemcpy")
        << ", \"skipped\": " << (m.baselineSkipped.empty() ? "null" : jsonString(m.baselineSkipped))
        << ", \"buffer_bytes\": " << m.baselineChunkBytes << ", \"calls\": " << m.baselineCalls
        << ", \"round\": " << jsonTimes(m.baselineRound, m.modelBytes)
        << ", \"gpu_events\": " << jsonTimes(m.baselineGpu, m.modelBytes) << "}"
        << ", \"ratio\": " << fixed(m.ratio(), 4) << ", \"ratio_goal\": "
        << fixed(m.channel == "nccl" ? kMaxNcclToBroadcastRatio : kMaxIpcToMemcpyRatio, 2)
        << ", \"goal_met\": " << jsonBool(met) << ", \"digests_compared\": " << m.digestsCompared
        << ", \"digests_equal\": " << m.digestsEqual << ", \"host_check\": " << jsonString(m.hostCheck)
        << ", \"memory\": " << jsonMemory(m) << ", \"max_late_start_ms\": " << fixed(m.maxLateStartMs, 4);
    if (m.channel == "cuda_ipc") {
      out << ", \"handles_after_first\": " << m.handlesAfterFirst << ", \"handles_at_end\": " << m.handlesAtEnd
          << ", \"export_generation\": " << m.exportGeneration;
    }
  }
  out << "}";
  return out.str();
}

void jsonList(std::ostringstream& out, const char* key, const std::vector<GpuMeasurement>& list) {
  out << "  \"" << key << "\": [";
  for (std::size_t i = 0; i < list.size(); ++i) out << (i == 0 ? "\n    " : ",\n    ") << jsonMeasurement(list[i]);
  out << (list.empty() ? "]" : "\n  ]") << ",\n";
}

template <typename T>
std::string jsonNumbers(const std::vector<T>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i == 0 ? "" : ", ") << values[i];
  out << "]";
  return out.str();
}

std::string jsonStrings(const std::vector<std::string>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i == 0 ? "" : ", ") + jsonString(values[i]);
  return out + "]";
}

std::string gpusJson(const GpuInfo& g) {
  std::ostringstream out;
  out << "{\"host\": " << jsonString(g.hostName) << ", \"visible\": " << g.deviceCount
      << ", \"driver_cuda_version\": " << jsonString(g.driverVersion) << ", \"runtime_version\": "
      << jsonString(g.runtimeVersion) << ", \"nccl_version\": " << jsonString(g.ncclVersion)
      << ", \"nccl_environment\": " << jsonStrings(g.ncclEnvironment) << ", \"devices\": [";
  for (std::size_t i = 0; i < g.devices.size(); ++i) {
    const GpuDeviceInfo& d = g.devices[i];
    out << (i == 0 ? "" : ", ") << "{\"index\": " << d.index << ", \"name\": " << jsonString(d.name)
        << ", \"memory_bytes\": " << d.memoryBytes << ", \"pci_bus_id\": " << jsonString(d.pciBusId)
        << ", \"compute_capability\": " << jsonString(d.capability) << ", \"multiprocessors\": " << d.multiprocessors
        << "}";
  }
  out << "], \"peer_access\": [";
  for (std::size_t i = 0; i < g.peerAccess.size(); ++i) out << (i == 0 ? "" : ", ") << jsonNumbers(g.peerAccess[i]);
  out << "]}";
  return out.str();
}

}  // namespace

std::string renderGpuMarkdown(const GpuBenchReport& report) {
  std::ostringstream out;
  out << "# wsync-bench gpu: " << report.machine.dateUtc << "\n\n";
  machineSection(out, report.machine);
  gpuSection(out, report);
  parameterSection(out, report);
  ncclSection(out, report);
  ipcSection(out, report);
  notesSection(out, report);
  methodSection(out);
  return out.str();
}

std::string renderGpuJson(const GpuBenchReport& report) {
  const GpuBenchConfig& c = report.config;
  std::ostringstream out;
  out << "{\n  \"mode\": \"gpu\",\n"
      << "  \"machine\": " << machineJson(report.machine) << ",\n"
      << "  \"gpus\": " << gpusJson(report.gpus) << ",\n"
      << "  \"command_line\": " << jsonString(c.commandLine) << ",\n"
      << "  \"parameters\": {\"quick\": " << jsonBool(c.quick) << ", \"channels\": " << jsonStrings(c.channels)
      << ", \"models\": " << jsonStrings(c.models) << ", \"receivers\": " << c.receivers
      << ", \"ipc_devices\": " << jsonNumbers(c.ipcDevices) << ", \"bucket_mib\": " << jsonNumbers(c.bucketMiB)
      << ", \"nccl_buffers\": " << bus::gpu::kNcclDefaultBuffers << ", \"plan_alignment\": " << kGpuPlanAlignment
      << ", \"warmup_rounds\": " << c.warmup
      << ", \"repetitions\": " << c.repetitions << ", \"allocation\": " << jsonString(c.allocation)
      << ", \"host_check\": " << jsonBool(c.hostCheck) << "},\n";
  jsonList(out, "nccl", report.results.nccl);
  jsonList(out, "cuda_ipc", report.results.cudaIpc);
  out << "  \"notes\": " << jsonStrings(report.results.notes) << ",\n"
      << "  \"wall_seconds\": " << fixed(report.wallSeconds, 2) << "\n}\n";
  return out.str();
}

}  // namespace wsync::bench
