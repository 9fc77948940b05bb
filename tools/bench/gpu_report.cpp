// `wsync-bench gpu`: the GPUs it ran on, and the report of its measurements.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <cuda_runtime_api.h>

#include <wsync/bus/channel/gpu/gpu_runtime.hpp>
#include <wsync/bus/channel/nccl/nccl_channel.hpp>

#include "gpu.hpp"

extern char** environ;

namespace wsync::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

// "12.8": CUDA versions are 1000 x major + 10 x minor.
std::string cudaVersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string gib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / kGiB, 2) + " GiB"; }
Cell size(std::uint64_t bytes) {
  const double value = static_cast<double>(bytes);
  return {bytes, value >= kGiB ? gib(bytes) : fixed(value / kMiB, value < 10 * kMiB ? 2 : 0) + " MiB"};
}
Cell milliseconds(const Summary& t) { return spread(t, "ms", t.median < 10 ? 2 : 1); }
Cell gbps(const Summary& t, std::uint64_t bytes) { return number(gigabytesPerSecond(t, bytes), 1); }
Cell digests(const GpuMeasurement& m) {
  const std::string count = std::to_string(m.digestsEqual) + "/" + std::to_string(m.digestsCompared);
  return {m.digestsAllEqual(), m.digestsAllEqual() ? "all " + count : "**" + count + "**"};
}
Cell hostCheck(const GpuMeasurement& m) { return {m.hostCheck, m.hostCheck == "differs" ? "**differs**" : m.hostCheck}; }
std::string devices(const GpuMeasurement& m) {
  std::string text;
  for (std::size_t rank = 0; rank < m.devices.size(); ++rank) {
    text += (rank == 0 ? "" : rank == 1 ? " -> " : ",") + std::to_string(m.devices[rank]);
  }
  return text;
}
double ratioGoal(const GpuMeasurement& m) {
  return m.channel == "nccl" ? kMaxNcclToBroadcastRatio : kMaxIpcToMemcpyRatio;
}
// The baseline's times, and how it moved the model when GPU memory was short for a second copy.
Cell baseline(const GpuMeasurement& m) {
  if (!m.baselineSkipped.empty()) return {nullptr, "none"};
  Cell times = milliseconds(m.baselineRound);
  if (m.baselineCalls > 1) times.text += " (" + std::to_string(m.baselineCalls) + " calls of " + gib(m.baselineChunkBytes) + ")";
  return times;
}

// The columns every measurement has, then the baseline's.
std::vector<Cell> measurementCells(const GpuMeasurement& m) {
  std::vector<Cell> cells{m.model, m.tensors, size(m.modelBytes), size(m.bucketBytes), m.buckets, devices(m)};
  if (!m.skipped.empty()) {
    cells.push_back("skipped: " + m.skipped);
    return cells;
  }
  const bool base = m.baselineSkipped.empty();
  cells.insert(cells.end(), {milliseconds(m.channelRound), gbps(m.channelRound, m.modelBytes), baseline(m),
                             base ? gbps(m.baselineRound, m.modelBytes) : Cell(), base ? ratio(m.ratio()) : Cell(),
                             base ? verdict(m.ratio() > 0 && m.ratio() <= ratioGoal(m)) : Cell()});
  return cells;
}

std::vector<Table::Column> measurementColumns(const std::string& baselineName, double goal) {
  return {{"model", "model"},           {"tensors", "tensors"},
          {"bytes", "size"},            {"bucket_bytes", "bucket"},
          {"buckets", "buckets"},       {"devices", "GPUs"},
          {"channel_ms", "channel ms"}, {"channel_gbps", "channel GB/s"},
          {"baseline_ms", baselineName + " ms"}, {"baseline_gbps", baselineName + " GB/s"},
          {"ratio", "channel/" + baselineName}, {"goal_met", "goal (<= " + ratio(goal).text + ")"}};
}

Table memoryTable(bool nccl) {
  std::vector<Table::Column> columns{{"model", "model"}, {"bucket_bytes", "bucket"}, {"device", "GPU"},
                                     {"side", "side"}, {"tensor_bytes", "tensors took"},
                                     {"extra_bytes", "extra (peak)"}, {"own_bytes", "channel's own buffers + tables"}};
  if (nccl) {
    columns.insert(columns.end(), {{"extra_buckets", "in buckets"},
                                   {"goal_met", "goal (<= " + fixed(kMaxNcclExtraBuckets, 0) + " buckets)"},
                                   {"raw_communicator_bytes", "raw communicator"}});
  }
  return Table(columns);
}

void addMemoryRows(Table& table, const GpuMeasurement& m, bool nccl) {
  for (const DeviceMemoryUse& use : m.memory) {
    const double buckets =
        m.bucketBytes > 0 ? static_cast<double>(use.extraBytes()) / static_cast<double>(m.bucketBytes) : 0;
    std::vector<Cell> row{m.model, size(m.bucketBytes), use.device, use.side, size(use.tensorBytes),
                          size(use.extraBytes()), size(use.channelBuffers + use.channelTables)};
    if (nccl) row.insert(row.end(), {number(buckets, 2), verdict(buckets <= kMaxNcclExtraBuckets), size(use.rawCommunicator)});
    table.row(std::move(row));
  }
}

}  // namespace

Json describeGpus() {
  std::array<char, 256> host{};
  int driver = 0;
  int runtime = 0;
  int count = 0;
  ::gethostname(host.data(), host.size() - 1);
  Json info{{"host", host.data()},
            {"visible", 0},
            {"no_device_reason", ""},
            {"driver_cuda_version", cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? cudaVersionText(driver)
                                                                                                : "none"},
            {"runtime_version", cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cudaVersionText(runtime) : "unknown"}};
  if (const cudaError_t counted = cudaGetDeviceCount(&count); counted != cudaSuccess) {
    count = 0;
    info["no_device_reason"] = std::string(driver == 0 ? "no NVIDIA driver; " : "") + "cudaGetDeviceCount: " +
                               cudaGetErrorName(counted) + " (" + cudaGetErrorString(counted) + ")";
    cudaGetLastError();
  } else if (count == 0) {
    info["no_device_reason"] = "the CUDA runtime sees no device";
  }
  info["visible"] = count;
  if (auto version = bus::gpu::ncclVersion()) {  // NCCL 2.9 and later: 10000 x major + 100 x minor + patch
    info["nccl_version"] = std::to_string(*version / 10000) + "." + std::to_string((*version % 10000) / 100) + "." +
                           std::to_string(*version % 100);
  } else {
    info["nccl_version"] = "unavailable: " + version.error().describe();
  }
  std::vector<std::string> environment;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (std::strncmp(*variable, "NCCL_", 5) == 0) environment.emplace_back(*variable);
  }
  std::sort(environment.begin(), environment.end());
  info["nccl_environment"] = environment;
  Json& list = info["devices"] = Json::array();
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
      cudaGetLastError();
      list.push_back({{"index", index}, {"name", "unknown"}, {"memory_bytes", 0}});
      continue;
    }
    std::array<char, 32> pci{};
    std::snprintf(pci.data(), pci.size(), "%04x:%02x:%02x.0", static_cast<unsigned>(properties.pciDomainID),
                  static_cast<unsigned>(properties.pciBusID), static_cast<unsigned>(properties.pciDeviceID));
    Json peers = Json::array();
    for (int to = 0; to < count; ++to) {
      int reachable = to == index ? 1 : 0;
      if (to != index && cudaDeviceCanAccessPeer(&reachable, index, to) != cudaSuccess) {
        cudaGetLastError();
        reachable = 0;
      }
      peers.push_back(reachable);
    }
    list.push_back({{"index", index}, {"name", properties.name}, {"memory_bytes", properties.totalGlobalMem},
                    {"pci_bus_id", pci.data()},
                    {"compute_capability", std::to_string(properties.major) + "." + std::to_string(properties.minor)},
                    {"multiprocessors", properties.multiProcessorCount}, {"peer_access", peers}});
  }
  return info;
}

void runGpuBenchmark(const GpuBenchConfig& c, Report& report) {
  // NVLink SHARP (multicast) is left off on the machines these runs are made on, and its buffers would count as the
  // channel's memory: off unless the environment says otherwise, before anything loads NCCL or starts a rank.
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  const Json g = describeGpus();
  const GpuResults r = measureGpus(c, g, std::cerr);
  report.json["gpus"] = g;
  report.parameters().update(Json{{"command_line", c.commandLine}, {"channels", c.channels}, {"models", c.models},
                                  {"receivers", c.receivers}, {"ipc_devices", c.ipcDevices},
                                  {"bucket_mib", c.bucketMiB}, {"nccl_buffers", bus::gpu::kNcclDefaultBuffers},
                                  {"plan_alignment", kGpuPlanAlignment}, {"warmup_rounds", c.warmup},
                                  {"repetitions", c.repetitions}, {"allocation", c.allocation},
                                  {"host_check", c.hostCheck}});

  Table gpus({{"index", "GPU"}, {"name", "name"}, {"memory_bytes", "memory"}, {"compute_capability", "compute"},
              {"multiprocessors", "SMs"}, {"pci_bus_id", "PCI"}, {"peer_access", "peer access (by GPU)"}});
  for (const Json& d : g.at("devices")) {
    gpus.row({d.at("index").get<int>(), d.value("name", ""), size(d.at("memory_bytes").get<std::uint64_t>()),
              d.value("compute_capability", ""), d.value("multiprocessors", 0), d.value("pci_bus_id", ""),
              Cell(d.value("peer_access", Json::array()), d.value("peer_access", Json::array()).dump())});
  }
  std::string environment;
  for (const Json& variable : g.at("nccl_environment")) environment += " `" + variable.get<std::string>() + "`";
  report.section("", "GPUs",
                 "Host " + g.at("host").get<std::string>() + "; CUDA driver supports " +
                     g.at("driver_cuda_version").get<std::string>() + ", runtime " +
                     g.at("runtime_version").get<std::string>() + " (linked statically); NCCL " +
                     g.at("nccl_version").get<std::string>() + " (libnccl.so.2, loaded at run time); NCCL "
                     "environment, which every rank inherits (NCCL_NVLS_ENABLE=0 set by the benchmark unless "
                     "given):" + environment + ".",
                 gpus);

  auto columns = measurementColumns("broadcast", kMaxNcclToBroadcastRatio);
  columns.insert(columns.end(), {{"sender_returned_ms", "sender returned ms"}, {"digests_equal", "digests equal"},
                                 {"host_check", "host check"}});
  Table nccl(columns);
  Table ncclMemory = memoryTable(true);
  for (const GpuMeasurement& m : r.nccl) {
    std::vector<Cell> row = measurementCells(m);
    if (m.skipped.empty()) {
      row.insert(row.end(), {number(m.senderReturn.median, 2), digests(m), hostCheck(m)});
      addMemoryRows(ncclMemory, m, true);
    }
    nccl.row(std::move(row));
  }
  columns = measurementColumns("memcpy", kMaxIpcToMemcpyRatio);
  columns.insert(columns.end(), {{"memcpy_gpu_ms", "memcpy GPU ms"}, {"exported_allocations", "exported allocations"},
                                 {"handles", "handles after round 1 / at end"}, {"export_generation", "export generation"},
                                 {"digests_equal", "digests equal"}, {"host_check", "host check"}});
  Table ipc(columns);
  Table ipcMemory = memoryTable(false);
  for (const GpuMeasurement& m : r.cudaIpc) {
    std::vector<Cell> row = measurementCells(m);
    if (m.skipped.empty()) {
      const bool fixedHandles = m.handlesAfterFirst == m.handlesAtEnd && m.exportGeneration == 1;
      row.insert(row.end(), {m.baselineSkipped.empty() ? number(m.baselineGpu.median, 2) : Cell(), m.senderAllocations,
                             Cell(Json{m.handlesAfterFirst, m.handlesAtEnd},
                                  std::to_string(m.handlesAfterFirst) + " / " + std::to_string(m.handlesAtEnd) +
                                      (fixedHandles ? "" : " **(changed)**")),
                             m.exportGeneration, digests(m), hostCheck(m)});
      addMemoryRows(ipcMemory, m, false);
    }
    ipc.row(std::move(row));
  }
  const std::string memory = "Extra: the device's free memory before the channel opened minus the least seen while "
                             "it was open (cudaMemGetInfo every " + std::to_string(kMemorySampleInterval.count()) +
                             " ms and after every round; device-wide, the ranks on one GPU share it): the channel's "
                             "buffers and tables, its communicator and whatever CUDA allocated for it.";
  if (!nccl.empty()) {
    report.section("nccl", "nccl: sender on GPU 0, receivers on the other GPUs",
                   "Round: every rank starts at one instant (CLOCK_MONOTONIC, spun on); it ends when the last rank's "
                   "`send`/`receive` returned. Broadcast: one `ncclBroadcast` of the model's bytes from one contiguous "
                   "buffer, through a blocking communicator of the same ranks, timed the same way. Median (min-max) of "
                   "the timed rounds; GB/s: model bytes (10^9) over the median. Digests: every receiver's against the "
                   "sender's, every channel round; host check: the first against the host's reference.",
                   nccl);
    report.section("nccl_memory", "nccl: GPU memory beyond the tensors", memory + " Raw communicator: what the "
                   "baseline's took, for comparison.", ncclMemory);
  }
  if (!ipc.empty()) {
    report.section("cuda_ipc", "cuda_ipc: sender and receivers in separate processes",
                   "Round: the sender's `send`, from its call to its return (once every receiver has copied and the "
                   "digests agree). memcpy: one `cudaMemcpyAsync` (`cudaMemcpyPeerAsync` across GPUs) of the model's "
                   "bytes between two contiguous buffers in the sender's process, wall clock, and between CUDA events. "
                   "Handles: the receivers' `openedHandles()`, fixed after the first round when nothing moved; export "
                   "generation 1 when the sender wrote its tables once.",
                   ipc);
    report.section("cuda_ipc_memory", "cuda_ipc: GPU memory beyond the tensors", memory, ipcMemory);
  }
  std::ostringstream notes;
  for (const std::string& note : r.notes) notes << "- " << note << "\n";
  for (const auto* rows : {&r.nccl, &r.cudaIpc}) {
    for (const GpuMeasurement& m : *rows) {
      const std::string name = "- " + m.channel + " " + m.model + " (" + size(m.bucketBytes).text + ")";
      if (!m.skipped.empty()) continue;
      if (!m.baselineSkipped.empty()) notes << name << ": no baseline, " << m.baselineSkipped << "\n";
      if (m.baselineCalls > 1) {
        notes << name << ": GPU memory was short for a second copy of the model, so the baseline moved it in "
              << m.baselineCalls << " calls, back to back on one stream\n";
      }
      if (m.maxLateStartMs * 1000 > static_cast<double>(kLateStartWarning.count())) {
        notes << name << ": a rank began a round up to " << fixed(m.maxLateStartMs, 2) << " ms after the common start\n";
      }
    }
  }
  report.json["notes"] = r.notes;
  if (!notes.str().empty()) report.markdown << "## Notes\n\n" << notes.str() << "\n";
}

}  // namespace wsync::bench
