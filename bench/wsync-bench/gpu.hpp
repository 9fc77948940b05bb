#pragma once
// `wsync-bench gpu`: the nccl and cuda_ipc channels between rank processes, beside raw NCCL and cudaMemcpy.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <wsync/bus/channel/nccl/nccl_channel.hpp>

#include "report.hpp"

namespace wsync::bench {

// CUDA's start, then a cudaMalloc per tensor (18,867 for qwen3-30b-a3b: seconds); ranks start one by one.
inline constexpr std::chrono::milliseconds kRankStartTimeout{180'000};
// A baseline buffer and communicator (NCCL's bootstrap takes seconds), or opening a channel.
inline constexpr std::chrono::milliseconds kRankSetupTimeout{180'000};
// Writing a version of 61 GB on the device: tens of ms at HBM speed, plus a launch per tensor.
inline constexpr std::chrono::milliseconds kPrepareTimeout{60'000};
// 61 GB: under a second over NVLink, seconds over PCIe; the nccl channel's 20 s stall watchdog fires first.
inline constexpr std::chrono::milliseconds kGpuRoundTimeout{120'000};
// A rank waits for its next command while later ranks start and allocate (minutes for 61 GB).
inline constexpr std::chrono::milliseconds kRankIdleTimeout{600'000};
// The common start lies this far ahead: ranks wake and spin within microseconds; room for a busy host.
inline constexpr std::chrono::milliseconds kStartLead{10};
// Free-memory sampling while a channel is open: the minimum is its peak; costs the round nothing measurable.
inline constexpr std::chrono::milliseconds kMemorySampleInterval{5};
// Event polling at the channels' own resolution (they poll every 50-100 us): both sides see their end alike.
inline constexpr std::chrono::microseconds kDevicePollInterval{20};
// Ranks' lines are read in slices, so that one slow rank does not hide another's death.
inline constexpr std::chrono::milliseconds kCollectSlice{2};
// A quitting rank frees its tensors (18,867 cudaFree calls for qwen3-30b-a3b): seconds.
inline constexpr std::chrono::milliseconds kRankExitTimeout{60'000};
// After a rank's socket closes, its exit status may take this long before it is called silent.
inline constexpr std::chrono::milliseconds kExitNoticeTimeout{2000};
// Room left beside the baseline's buffers for communicators, tables and CUDA (the channel's buckets come on top).
inline constexpr std::uint64_t kBaselineHeadroomBytes = std::uint64_t{3} << 30;
// A baseline in smaller pieces is skipped: the pieces' launches would count.
inline constexpr std::uint64_t kMinBaselineChunkBytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kBaselineChunkGranule = std::uint64_t{2} << 20;
// The goals: nccl within 5% of a raw ncclBroadcast, cuda_ipc within 10% of a cudaMemcpy (issue 18; was 15%),
// nccl's extra <= 2 buckets.
inline constexpr double kMaxNcclToBroadcastRatio = 1.05;
inline constexpr double kMaxIpcToMemcpyRatio = 1.10;
inline constexpr double kMaxNcclExtraBuckets = 2.0;

struct GpuBenchConfig {
  ModeOptions mode;
  std::vector<std::string> channels{"nccl", "cuda_ipc"};
  bool channelsGiven = false;  // --channel named: a channel the machine cannot run is an error, not a skip
  // deepseek-v3:8: a frontier MoE's real shapes (FP8 experts beside their block scales), 63 GB: a rank that cannot
  // hold it says so (nomemory) and the others go on.
  std::vector<std::string> models{"qwen2.5-7b", "qwen3-30b-a3b", "deepseek-v3:8"};
  std::size_t receivers = 0;          // 0: nccl, one per other visible GPU; cuda_ipc, one
  std::vector<int> ipcDevices{0, 0};  // cuda_ipc: the sender's device, the receivers'
  // nccl: each; cuda_ipc: the first. 1 GiB: vLLM's weight-sync buffers (2 x 1 GiB).
  std::vector<std::uint64_t> bucketMiB{1024};
  std::size_t warmup = 2;
  std::size_t repetitions = 10;
  std::string allocation = "tensor";
  // The sender vouches that its allocations were kept (bus::Channel::setAllocationsKept), as the Python package does
  // when PyTorch's allocator freed nothing between publishes: cuda_ipc skips its per-allocation check each round.
  bool allocationsKept = false;
  // Every rank names its span array (bus::Channel::setLayoutToken), as the Python trainer does when publish(version)
  // repeats its tensors: the channels skip reading the array each round to check their cached layout.
  bool layoutKept = false;
  // nccl through NCCL's network transport, the stand-in for an inter-node fabric (docs/hosts.md): sockets, P2P and
  // SHM off, each rank a host of its own to NCCL, so that ranks may share a GPU.
  bool ncclNetwork = false;
  // nccl: the first and last broadcasts of a transfer (bus/channel/nccl/broadcast_slices.hpp); 0: no ramp.
  std::uint64_t ncclFirstSliceMiB = bus::gpu::kNcclFirstSliceBytes >> 20;
  // nccl: kernel blocks of the copies that run beside the broadcasts (NcclChannelConfig::copyBlocks).
  std::uint32_t ncclCopyBlocks = bus::gpu::kNcclDefaultCopyBlocks;
  // nccl: ... of the copies beside a smaller broadcast than themselves, in the ramps
  // (NcclChannelConfig::rampCopyBlocks).
  std::uint32_t ncclRampCopyBlocks = bus::gpu::kNcclDefaultRampCopyBlocks;
  // nccl: staging buffers (NcclChannelConfig::bufferCount) and the largest broadcast, each buffer's size
  // (NcclChannelConfig::maxSliceBytes; 0: half a bucket).
  std::uint32_t ncclBuffers = bus::gpu::kNcclDefaultBuffers;
  std::uint64_t ncclMaxSliceMiB = 0;
  // nccl: how broadcasts reach NCCL (NcclChannelConfig::enqueue): "child" or "nonblocking".
  std::string ncclEnqueue = "child";
  // nccl: the channel communicator's ncclConfig_t::maxCTAs (NcclChannelConfig::maxCtas); 0: NCCL's choice. The raw
  // baseline keeps NCCL's choice.
  std::int32_t ncclMaxCtas = 0;
  // nccl: how often a rank's transfer looks at its events (NcclChannelConfig::pollInterval); 0: yield between looks.
  std::uint32_t ncclPollMicroseconds = static_cast<std::uint32_t>(bus::gpu::kNcclPollInterval.count());
  // cuda_ipc: how long each side yields before sleeping on the segment's futex (CudaIpcChannel::setSpinWait).
  std::uint32_t ipcSpinMicroseconds = 0;
  // Profiling in the report: nccl, every rank's broadcasts and copies (bus/channel/nccl/nccl_timeline.hpp);
  // cuda_ipc, the hand-offs of each round between the sides (bus/channel/cuda_ipc/cuda_ipc_timing.hpp).
  bool timeline = false;
  void quick() {
    models = {"qwen2.5-7b"};
    warmup = 1;
    repetitions = 3;
  }
};

// The rank processes (agent-gpu-rank): rank 0 sends, the others receive; commands in gpu_rank_protocol.hpp.
struct GpuRankOptions {
  std::string channel;  // "nccl" or "cuda_ipc"
  std::uint32_t rank = 0;
  std::uint32_t world = 0;  // sender + receivers
  int device = 0;
  int baselineDevice = 0;  // cuda_ipc sender: where the memcpy baseline's destination lives
  std::string model;
  std::string allocation;    // "tensor" or "torch"
  std::string segment;       // cuda_ipc: the segment the benchmark created
  bool ncclNetwork = false;  // GpuBenchConfig::ncclNetwork: the rank sets NCCL's environment for it before NCCL loads
  bool allocationsKept = false;                                     // GpuBenchConfig::allocationsKept
  std::uint64_t ncclFirstSliceBytes = 0;                            // GpuBenchConfig::ncclFirstSliceMiB, in bytes
  std::uint32_t ncclCopyBlocks = bus::gpu::kNcclDefaultCopyBlocks;  // GpuBenchConfig::ncclCopyBlocks
  bool timeline = false;                                            // GpuBenchConfig::timeline
  std::int32_t ncclMaxCtas = 0;                                     // GpuBenchConfig::ncclMaxCtas
  std::uint32_t ncclPollMicroseconds = 0;                           // GpuBenchConfig::ncclPollMicroseconds
  std::uint32_t ipcSpinMicroseconds = 0;                            // GpuBenchConfig::ipcSpinMicroseconds
  bool layoutKept = false;                                          // GpuBenchConfig::layoutKept
  std::uint32_t ncclBuffers = bus::gpu::kNcclDefaultBuffers;        // GpuBenchConfig::ncclBuffers
  std::uint64_t ncclMaxSliceBytes = 0;                              // GpuBenchConfig::ncclMaxSliceMiB, in bytes
  std::string ncclEnqueue = "child";                                // GpuBenchConfig::ncclEnqueue
  std::uint32_t ncclRampCopyBlocks = bus::gpu::kNcclDefaultRampCopyBlocks;  // GpuBenchConfig::ncclRampCopyBlocks
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GpuRankOptions, channel, rank, world, device, baselineDevice, model, allocation,
                                   segment, ncclNetwork, allocationsKept, ncclFirstSliceBytes, ncclCopyBlocks, timeline,
                                   ncclMaxCtas, ncclPollMicroseconds, ipcSpinMicroseconds, layoutKept, ncclBuffers,
                                   ncclMaxSliceBytes, ncclEnqueue, ncclRampCopyBlocks)
int runGpuRank(const GpuRankOptions& options);

// The host, CUDA, NCCL, NCCL_* environment and GPUs, for the machine table; read without a CUDA context.
Json describeGpus();

// Device memory on one GPU of a measurement, from cudaMemGetInfo in the ranks on it (device-wide figures).
struct DeviceMemoryUse {
  int device = 0;
  std::string side{};                // "sender", "receiver 2", "sender + 1 receiver"
  std::uint32_t sides = 0;           // ranks on this device (several with --nccl-network on one GPU)
  std::uint64_t tensorBytes = 0;     // what the tensors took of the free memory (allocation granularity included)
  std::uint64_t freeBeforeOpen = 0;  // after tensors and baselines, before the channel opened
  std::uint64_t minFree = 0;         // the least seen while it was open (sampled every few ms and after transfers)
  std::uint64_t channelBuffers = 0;  // the channel's own, as memory() reports them (summed over the ranks here)
  std::uint64_t channelTables = 0;
  std::uint64_t rawCommunicator = 0;  // nccl: what the baseline's communicator took here, for comparison

  std::uint64_t extraBytes() const { return freeBeforeOpen > minFree ? freeBeforeOpen - minFree : 0; }
};

struct GpuMeasurement {
  std::string channel;  // "nccl" or "cuda_ipc"
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t modelBytes = 0;
  std::uint64_t bucketBytes = 0;
  std::uint32_t buckets = 0;   // of the plan
  std::vector<int> devices{};  // by rank: the sender's first
  std::size_t senderAllocations = 0;

  // nccl: common start -> the last rank returned; cuda_ipc: send(), which returns once every receiver copied.
  Summary channelRound{};
  Summary senderReturn{};  // nccl: from the common start until the sender's send() returned
  // One ncclBroadcast of the model's bytes, timed like the channel, or one cudaMemcpy(Peer), wall clock in the sender.
  Summary baselineRound{};
  Summary baselineGpu{};  // the same, between CUDA events on the sender's stream
  // cuda_ipc: from the round's start until every receiving process ran a kernel of its own after it (the engine's
  // next step), after the channel and after the baseline; and that kernel alone, launch to seen done. On one GPU, the
  // baseline leaves the GPU in the sender's context, and the step pays the switch that the channel's receivers pay
  // inside their copy.
  Summary channelToEngine{};
  Summary baselineToEngine{};
  Summary channelStep{};
  Summary baselineStep{};
  std::uint64_t baselineChunkBytes = 0;  // the baseline buffer; smaller than the model when memory was short
  std::size_t baselineCalls = 0;         // broadcasts or copies per round (1 unless memory was short)
  std::string baselineSkipped{};         // why there was no baseline; empty when there was one

  std::size_t digestsCompared = 0;  // receivers x channel rounds, warm-up included
  std::size_t digestsEqual = 0;     // a receiver's digest and byte count equal to the sender's

  std::vector<DeviceMemoryUse> memory{};
  double maxLateStartMs = 0;  // the latest any rank began a round after the common start
  // The channel's first transfer, warm-up and outside the summaries, timed like the others: what a new channel pays
  // once (cuda_ipc: every allocation exported and opened, the tables written; nccl: the staging allocated, the tables
  // written, the peers connected).
  double firstRoundMs = 0;

  // cuda_ipc: the receivers' open handles after round 1 and at the end; export generation (1: tables written once).
  std::uint32_t handlesAfterFirst = 0;
  std::uint32_t handlesAtEnd = 0;
  std::uint64_t exportGeneration = 0;

  // --timeline, by rank: each timed round's summary, and the raw broadcast's time between CUDA events there;
  // the last timed round's slices (JSON: [bucket, bytes, direct, broadcast begin, end, copy begin, end] in ms).
  std::vector<std::vector<bus::NcclTimelineSummary>> timelines{};
  std::vector<std::vector<double>> rawGpuMs{};
  // ... and each rank's own call (its send or receive, start to return) and raw broadcast (enqueue to seen done), ms:
  // against the GPU times, what the host added (enqueueing, and seeing the end late).
  std::vector<std::vector<double>> channelCallMs{};
  std::vector<std::vector<double>> rawCallMs{};
  Json lastSlices{};
  Json lastHostTimings = Json::array();  // ... and its host times (NcclHostTiming), by rank
  // --timeline, cuda_ipc: each timed round's stages in ms (sender's export check, hand-off to the receivers, their
  // launch, copy, report, hand-off back), by stage name in the order of the round; the copy kernel's GPU time.
  std::vector<std::pair<std::string, std::vector<double>>> ipcStages{};

  std::string skipped{};  // why the measurement did not run; empty when it did

  double ratio() const { return baselineRound.median > 0 ? channelRound.median / baselineRound.median : 0; }
  double engineRatio() const {
    return baselineToEngine.median > 0 ? channelToEngine.median / baselineToEngine.median : 0;
  }
};

struct GpuResults {
  std::vector<GpuMeasurement> nccl;
  std::vector<GpuMeasurement> cudaIpc;
  std::vector<std::string> notes;     // channels left out and why
  std::vector<std::string> failures;  // models whose ranks failed (their rows say so); the others were measured
};

// Throws BenchFailure when there is no GPU or the configuration cannot run; a model whose ranks fail or go silent is
// a failure of its rows, and the next model is measured.
GpuResults measureGpus(const GpuBenchConfig& config, const Json& gpus, std::ostream& progress);

void runGpuBenchmark(const GpuBenchConfig& config, Report& report);

}  // namespace wsync::bench
