// `wsync-bench gpu`: the GPUs it ran on, and the report of its measurements.
#include <unistd.h>
#include <algorithm>

#include <array>
#include <cstring>
#include <iostream>
#include <set>

#include <cuda_runtime_api.h>

#include <wsync/bus/channel/gpu/gpu_runtime.hpp>
#include <wsync/bus/channel/nccl/nccl_channel.hpp>

#include "gpu.hpp"
#include "tensor_memory.hpp"

extern char** environ;

namespace wsync::bench {
namespace {

std::string cudaVersionText(int version) {  // 1000 x major + 10 x minor
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}
Cell size(std::uint64_t bytes) {
  const double inMiB = mib(bytes);
  return {bytes, inMiB >= 1024 ? fixed(inMiB / 1024, 2) + " GiB" : fixed(inMiB, inMiB < 10 ? 2 : 0) + " MiB"};
}
// GB/s (10^9 bytes) at the median of round times in milliseconds.
Cell gbps(const Summary& ms, std::uint64_t bytes) {
  return number(ms.median > 0 ? static_cast<double>(bytes) / (ms.median * 1e6) : 0, 1);
}

// A measurement's row: what moved where, the channel, its baseline, then what only that channel has.
std::vector<Cell> measurementRow(const GpuMeasurement& m, bool nccl) {
  std::string devices;
  for (std::size_t rank = 0; rank < m.devices.size(); ++rank) {
    devices += (rank == 0 ? "" : rank == 1 ? " -> " : ",") + std::to_string(m.devices[rank]);
  }
  std::vector<Cell> row{m.model, m.tensors, size(m.modelBytes), size(m.bucketBytes), m.buckets, devices};
  if (!m.skipped.empty()) {
    row.push_back("skipped: " + m.skipped);
    return row;
  }
  const bool base = m.baselineSkipped.empty();
  Cell baseline = base ? spread(m.baselineRound, "ms", 2) : Cell(nullptr, "none: " + m.baselineSkipped);
  if (m.baselineCalls > 1) {  // GPU memory was short for a second copy of the model
    baseline.text += " (" + std::to_string(m.baselineCalls) + " calls of " + size(m.baselineChunkBytes).text + ")";
  }
  const double goal = nccl ? kMaxNcclToBroadcastRatio : kMaxIpcToMemcpyRatio;
  row.insert(row.end(),
             {spread(m.channelRound, "ms", 2), gbps(m.channelRound, m.modelBytes), baseline,
              base ? gbps(m.baselineRound, m.modelBytes) : Cell(), base ? ratio(m.ratio()) : Cell(),
              base ? verdict(m.ratio() > 0 && m.ratio() <= goal) : Cell(), digests(m.digestsEqual, m.digestsCompared),
              number(m.maxLateStartMs, 2), number(m.firstRoundMs, 2)});
  if (nccl) {
    row.push_back(number(m.senderReturn.median, 2));
  } else {
    const bool fixedHandles = m.handlesAfterFirst == m.handlesAtEnd && m.exportGeneration == 1;
    row.insert(row.end(), {base ? number(m.baselineGpu.median, 2) : Cell(), m.senderAllocations,
                           Cell(Json{m.handlesAfterFirst, m.handlesAtEnd}, std::to_string(m.handlesAfterFirst) + " / " +
                                                                               std::to_string(m.handlesAtEnd) +
                                                                               (fixedHandles ? "" : " **(changed)**")),
                           m.exportGeneration, base ? spread(m.channelToEngine, "ms", 2) : Cell(),
                           base ? spread(m.baselineToEngine, "ms", 2) : Cell(), base ? ratio(m.engineRatio()) : Cell(),
                           base ? Cell(Json{m.channelStep.median, m.baselineStep.median},
                                       fixed(m.channelStep.median, 3) + " / " + fixed(m.baselineStep.median, 3))
                                : Cell()});
  }
  return row;
}

// --timeline: per rank, the medians over the timed rounds of where the channel's time went, beside the raw
// broadcast's own GPU time on that rank.
void timelineSection(const std::vector<GpuMeasurement>& rows, Report& report) {
  Table table({{"model", "model"},
               {"bucket_bytes", "bucket"},
               {"rank", "rank"},
               {"device", "GPU"},
               {"slices", "slices"},
               {"raw_gpu_ms", "raw broadcast GPU ms"},
               {"busy_ms", "broadcasts busy ms"},
               {"busy_over_raw", "busy/raw"},
               {"gaps_ms", "gaps between broadcasts ms"},
               {"head_ms", "head ms"},
               {"tail_ms", "tail ms"},
               {"copy_ms", "copies ms"},
               {"copy_beside_ms", "copies beside broadcasts ms"},
               {"total_ms", "total GPU ms"},
               {"call_over_gpu_ms", "call - GPU ms"},
               {"raw_call_over_gpu_ms", "raw: call - GPU ms"}});
  Json slices = Json::array();
  for (const GpuMeasurement& m : rows) {
    if (!m.skipped.empty() || m.timelines.empty()) continue;
    for (std::size_t rank = 0; rank < m.timelines.size(); ++rank) {
      const auto median = [&](double bus::NcclTimelineSummary::*figure) {
        std::vector<double> values;
        for (const bus::NcclTimelineSummary& round : m.timelines[rank]) values.push_back(round.*figure);
        return summarize(std::move(values)).median;
      };
      const double raw = rank < m.rawGpuMs.size() ? summarize(m.rawGpuMs[rank]).median : 0;
      const double busy = median(&bus::NcclTimelineSummary::broadcastBusy);
      const double total = median(&bus::NcclTimelineSummary::total);
      // The host's share: a rank's call against its GPU work (medians of each; a difference of medians).
      const double call = rank < m.channelCallMs.size() ? summarize(m.channelCallMs[rank]).median : 0;
      const double rawCall = rank < m.rawCallMs.size() ? summarize(m.rawCallMs[rank]).median : 0;
      table.row({m.model, size(m.bucketBytes), rank == 0 ? "sender" : "receiver " + std::to_string(rank),
                 m.devices[rank], m.timelines[rank].empty() ? 0 : m.timelines[rank].front().slices,
                 raw > 0 ? number(raw, 2) : Cell(), number(busy, 2), raw > 0 ? ratio(busy / raw) : Cell(),
                 number(median(&bus::NcclTimelineSummary::broadcastGaps), 2),
                 number(median(&bus::NcclTimelineSummary::head), 2), number(median(&bus::NcclTimelineSummary::tail), 2),
                 number(median(&bus::NcclTimelineSummary::copyBusy), 2),
                 number(median(&bus::NcclTimelineSummary::copyBesideBroadcast), 2), number(total, 2),
                 call > 0 ? number(call - total, 2) : Cell(),
                 raw > 0 && rawCall > 0 ? number(rawCall - raw, 2) : Cell()});
    }
    slices.push_back(
        {{"model", m.model}, {"bucket_bytes", m.bucketBytes}, {"ranks", m.lastSlices}, {"host", m.lastHostTimings}});
  }
  if (table.empty()) return;
  report.section(
      "nccl_timeline", "nccl: where each rank's time went (--timeline)",
      "CUDA timing events on every rank around each broadcast (the communication stream) and each "
      "pack/unpack (the copy stream), medians over the timed rounds; times from the transfer's first "
      "enqueued work. Busy: the broadcasts' own durations, summed, beside one raw `ncclBroadcast` of the "
      "model timed between events on the same rank. Gaps: the communication stream waiting between "
      "broadcasts (for a pack, or a buffer to free). Head: until the first broadcast began (the sender's "
      "first pack). Tail: after the last broadcast, until the last unpack ended. Call - GPU: the rank's "
      "send or receive, call to return, less its GPU total (enqueueing, and seeing the end late); raw: "
      "the same for the raw broadcast (enqueue to its event seen done, polled every 20 us). The last "
      "timed round's slices are in the JSON (`nccl_timeline_slices`: bucket, bytes, direct, broadcast begin and end, "
      "copy begin and end, and the host time of the broadcast's call and of its settling; `host`: each rank's "
      "enqueue begin and end, end seen and return, ms from its call).",
      table);
  report.json["nccl_timeline_slices"] = std::move(slices);
}

// --timeline, cuda_ipc: per model, the medians of each stage of a round, in the order the round passes them.
void ipcStagesSection(const std::vector<GpuMeasurement>& rows, Report& report) {
  Table table({{"model", "model"},
               {"tensors", "tensors"},
               {"stage", "stage"},
               {"median_ms", "median ms"},
               {"range_ms", "range ms"},
               {"share", "of the send"}});
  for (const GpuMeasurement& m : rows) {
    if (!m.skipped.empty() || m.ipcStages.empty()) continue;
    const double total = summarize(m.ipcStages.back().second).median;
    for (const auto& [stage, values] : m.ipcStages) {
      const Summary summary = summarize(values);
      table.row({m.model, m.tensors, stage, number(summary.median, 3),
                 Cell(Json{summary.min, summary.max}, fixed(summary.min, 3) + "-" + fixed(summary.max, 3)),
                 total > 0 ? percent(summary.median / total) : Cell()});
    }
  }
  if (table.empty()) return;
  report.section("cuda_ipc_stages", "cuda_ipc: where a round went (--timeline)",
                 "Instants on the host's monotonic clock in the sender and the receiver (one clock for both "
                 "processes), medians over the timed rounds; with several receivers, the slowest one's. Hand-offs: "
                 "from one side publishing its word in the segment (and waking the futex) until the other saw it. "
                 "The copy kernel's GPU time is between CUDA events around its launch, inside the host-seen copy.",
                 table);
}

}  // namespace

Json describeGpus() {
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  int driver = 0;
  int runtime = 0;
  int count = 0;
  const auto nccl = bus::gpu::ncclVersion();  // NCCL 2.9 and later: 10000 x major + 100 x minor + patch
  Json info{
      {"host", host.data()},
      {"cuda", "driver " +
                   (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? cudaVersionText(driver) : "none") +
                   ", runtime " + (cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cudaVersionText(runtime) : "?") +
                   " (static)"},
      {"nccl", nccl ? std::to_string(*nccl / 10000) + "." + std::to_string((*nccl % 10000) / 100) + "." +
                          std::to_string(*nccl % 100)
                    : "unavailable: " + nccl.error().describe()}};
  if (const cudaError_t counted = cudaGetDeviceCount(&count); counted != cudaSuccess) {
    count = 0;
    info["no_device_reason"] = std::string(driver == 0 ? "no NVIDIA driver; " : "") +
                               "cudaGetDeviceCount: " + cudaGetErrorName(counted) + " (" + cudaGetErrorString(counted) +
                               ")";
    cudaGetLastError();
  }
  std::set<std::string> environment;  // sorted
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (std::strncmp(*variable, "NCCL_", 5) == 0) environment.emplace(*variable);
  }
  info["nccl_environment"] = environment;  // every rank inherits it
  Json& gpus = info["gpus"] = Json::array();
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) cudaGetLastError();
    std::string peers;  // the GPUs this one can access directly (NVLink or PCIe peer to peer)
    for (int to = 0; to < count; ++to) {
      int reachable = 0;
      if (to != index && cudaDeviceCanAccessPeer(&reachable, index, to) == cudaSuccess && reachable != 0) {
        peers += (peers.empty() ? " " : ",") + std::to_string(to);
      }
      cudaGetLastError();
    }
    gpus.push_back(std::to_string(index) + ": " + properties.name + ", " + size(properties.totalGlobalMem).text +
                   ", compute " + std::to_string(properties.major) + "." + std::to_string(properties.minor) + ", " +
                   std::to_string(properties.multiProcessorCount) + " SMs, peer access to" +
                   (peers.empty() ? " none" : peers));
  }
  return info;
}

void runGpuBenchmark(const GpuBenchConfig& c, Report& report) {
  // NVLink SHARP's buffers would count as the channel's: off unless the environment says otherwise, before NCCL loads.
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  const Json gpus = describeGpus();
  report.json["machine"].update(gpus);
  const GpuResults r = measureGpus(c, gpus, std::cerr);
  report.failures.insert(report.failures.end(), r.failures.begin(), r.failures.end());
  report.parameters().update(Json{{"notes", r.notes},
                                  {"channels", c.channels},
                                  {"models", c.models},
                                  {"receivers", c.receivers},
                                  {"ipc_devices", c.ipcDevices},
                                  {"bucket_mib", c.bucketMiB},
                                  {"nccl_buffers", c.ncclBuffers},
                                  {"nccl_max_slice_mib", c.ncclMaxSliceMiB},
                                  {"plan_alignment", kPlanAlignment},
                                  {"warmup_rounds", c.warmup},
                                  {"repetitions", c.repetitions},
                                  {"allocation", c.allocation},
                                  {"allocations_kept", c.allocationsKept},
                                  {"layout_kept", c.layoutKept},
                                  {"nccl_first_slice_mib", c.ncclFirstSliceMiB},
                                  {"nccl_copy_blocks", c.ncclCopyBlocks},
                                  {"nccl_ramp_copy_blocks", c.ncclRampCopyBlocks},
                                  {"timeline", c.timeline},
                                  {"nccl_max_ctas", c.ncclMaxCtas},
                                  {"nccl_poll_us", c.ncclPollMicroseconds},
                                  {"nccl_enqueue", c.ncclEnqueue},
                                  {"ipc_spin_us", c.ipcSpinMicroseconds}});

  for (const bool nccl : {true, false}) {
    const std::string baseline = nccl ? "broadcast" : "memcpy";
    std::vector<Table::Column> columns{
        {"model", "model"},
        {"tensors", "tensors"},
        {"bytes", "size"},
        {"bucket_bytes", "bucket"},
        {"buckets", "buckets"},
        {"devices", "GPUs"},
        {"channel_ms", "channel ms"},
        {"channel_gbps", "channel GB/s"},
        {"baseline_ms", baseline + " ms"},
        {"baseline_gbps", baseline + " GB/s"},
        {"ratio", "channel/" + baseline},
        {"goal_met", "goal (<= " + ratio(nccl ? kMaxNcclToBroadcastRatio : kMaxIpcToMemcpyRatio).text + ")"},
        {"digests_equal", "digests equal"},
        {"max_late_start_ms", "latest start ms"},
        {"first_round_ms", "first round ms"}};
    if (nccl) columns.push_back({"sender_returned_ms", "sender returned ms"});
    if (!nccl) {
      columns.insert(columns.end(), {{"memcpy_gpu_ms", "memcpy GPU ms"},
                                     {"exported_allocations", "exported allocations"},
                                     {"handles", "handles after round 1 / at end"},
                                     {"export_generation", "export generation"},
                                     {"engine_channel_ms", "engine's next kernel done: channel ms"},
                                     {"engine_memcpy_ms", "engine's next kernel done: memcpy ms"},
                                     {"engine_ratio", "there, channel/memcpy"},
                                     {"step_ms", "that kernel alone, after channel / memcpy ms"}});
    }
    Table table(columns);
    Table memory({{"model", "model"},
                  {"bucket_bytes", "bucket"},
                  {"device", "GPU"},
                  {"side", "side"},
                  {"tensor_bytes", "tensors took"},
                  {"extra_bytes", "extra (peak)"},
                  {"own_bytes", "channel's own buffers + tables"},
                  {"extra_buckets", "in buckets per side"},
                  {"goal_met", "goal (<= " + fixed(kMaxNcclExtraBuckets, 0) + " buckets per side, nccl)"},
                  {"raw_communicator_bytes", "raw communicator"}});
    for (const GpuMeasurement& m : nccl ? r.nccl : r.cudaIpc) {
      table.row(measurementRow(m, nccl));
      if (!m.skipped.empty()) continue;
      for (const DeviceMemoryUse& use : m.memory) {
        // Per side: ranks sharing a GPU (--nccl-network) each hold their own buffers there.
        const double buckets = static_cast<double>(use.extraBytes()) / static_cast<double>(m.bucketBytes) /
                               static_cast<double>(std::max<std::uint32_t>(use.sides, 1));
        memory.row({m.model, size(m.bucketBytes), use.device, use.side, size(use.tensorBytes), size(use.extraBytes()),
                    size(use.channelBuffers + use.channelTables), number(buckets, 2),
                    nccl ? verdict(buckets <= kMaxNcclExtraBuckets) : Cell(),
                    nccl ? size(use.rawCommunicator) : Cell()});
      }
    }
    if (table.empty()) continue;
    const std::string key = nccl ? "nccl" : "cuda_ipc";
    report.section(key, nccl ? "nccl: sender on GPU 0, receivers on the other GPUs" : "cuda_ipc: sender and receivers",
                   nccl ? "Round: from an instant common to every rank (CLOCK_MONOTONIC, spun on) until the last "
                          "rank's `send`/`receive` returned. Broadcast: one `ncclBroadcast` of the model's bytes "
                          "through a blocking communicator of the same ranks, timed the same way. First round: the "
                          "channel's first transfer, timed the same way: the communicators were joined before it, and "
                          "in it the staging is allocated, the copy tables written and the peers connected."
                        : "Round: the sender's `send`, from its call to its return (every receiver copied, digests "
                          "agreed). memcpy: one `cudaMemcpyAsync` of the model's bytes in the sender's process, wall "
                          "clock and between CUDA events. Engine's next kernel done: after each round of either, every "
                          "receiving process launches one kernel of its own and spins until it is done; from the "
                          "round's start to the last receiver's kernel done (the memcpy's receivers launch once the "
                          "copy was seen done). On a GPU both processes share, the memcpy leaves the GPU in the "
                          "sender's context, so that kernel pays the switch between contexts that the channel's "
                          "receivers pay inside their copy. First round: the channel's first send, in which every "
                          "allocation is exported and opened once.",
                   table);
    report.section(key + "_memory", key + ": GPU memory beyond the tensors",
                   "Extra: a device's free memory before the channel opened minus the least seen while it was open "
                   "(every " +
                       std::to_string(kMemorySampleInterval.count()) + " ms and after every round).",
                   memory);
  }
  if (c.timeline) {
    timelineSection(r.nccl, report);
    ipcStagesSection(r.cudaIpc, report);
  }
}

}  // namespace wsync::bench
