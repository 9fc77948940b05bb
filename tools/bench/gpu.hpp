#pragma once
// `wsync-bench gpu`: the nccl and cuda_ipc channels between rank processes of this executable, each beside its raw
// baseline in the same processes, interleaved round by round: one ncclBroadcast of the model's bytes from one
// contiguous buffer (nccl), one cudaMemcpy of them between two contiguous buffers (cuda_ipc). Its parameters, goals,
// limits, ranks and results.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <wsync/bus/protocol/manifest.hpp>

#include "report.hpp"

namespace wsync::bench {

// Starting a rank: CUDA's initialisation, then a cudaMalloc per tensor (18,867 for qwen3-30b-a3b: seconds). Ranks
// start one after the other, so each has the machine to itself.
inline constexpr std::chrono::milliseconds kRankStartTimeout{180'000};
// A baseline buffer and a communicator (NCCL's bootstrap and connections take seconds), or opening a channel.
inline constexpr std::chrono::milliseconds kRankSetupTimeout{180'000};
// Writing a version of 61 GB on the device: tens of milliseconds at HBM speed, plus a launch per tensor.
inline constexpr std::chrono::milliseconds kPrepareTimeout{60'000};
// One transfer of 61 GB: under a second over NVLink, several over PCIe. The nccl channel's own watchdog
// (kNcclStallTimeout, 20 s without a bucket) fires long before.
inline constexpr std::chrono::milliseconds kGpuRoundTimeout{120'000};
// A rank's wait for its next command: the ranks after it start and allocate one by one (minutes for 61 GB).
inline constexpr std::chrono::milliseconds kRankIdleTimeout{600'000};
// A round's common start lies this far ahead when it is sent: a rank wakes, parses the line and spins on the clock
// within microseconds; 10 ms leave room for a busy host (the report gives the latest a rank began).
inline constexpr std::chrono::milliseconds kStartLead{10};
// While a channel is open each rank reads the device's free memory this often (and after every transfer): the
// minimum is the channel's peak. A cudaMemGetInfo every 5 ms costs the round nothing measurable.
inline constexpr std::chrono::milliseconds kMemorySampleInterval{5};
// How often a rank looks at an event it waits for: the channels poll theirs every 50-100 us, so both sides of a
// comparison see their end with the same resolution.
inline constexpr std::chrono::microseconds kDevicePollInterval{20};
// Every rank's line is read in slices of this much, so that one slow rank does not hide another's death.
inline constexpr std::chrono::milliseconds kCollectSlice{2};
// A rank told to quit frees its tensors (18,867 cudaFree calls for qwen3-30b-a3b): seconds.
inline constexpr std::chrono::milliseconds kRankExitTimeout{60'000};
// After a rank's socket closes, how long its exit status may take before the rank is called silent instead.
inline constexpr std::chrono::milliseconds kExitNoticeTimeout{2000};
// Tensors start at multiples of 256 bytes in a bucket (docs/bucket-plan.md); the GPU channels need at least 16.
inline constexpr std::uint32_t kGpuPlanAlignment = 256;
// Any value: content is a pure function of (seed, tensor, version), so runs are comparable.
inline constexpr std::uint64_t kGpuContentSeed = 20261201;
// Beside a baseline's buffers each device keeps this much free for what comes later (NCCL's communicators, a few
// hundred MiB each, the channel's tables, CUDA's own); the channel's buckets come on top. A baseline cut into pieces
// smaller than kMinBaselineChunkBytes is skipped: the pieces' launches would count. Pieces are whole 2 MiB granules.
inline constexpr std::uint64_t kBaselineHeadroomBytes = std::uint64_t{3} << 30;
inline constexpr std::uint64_t kMinBaselineChunkBytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kBaselineChunkGranule = std::uint64_t{2} << 20;
// The goals: nccl within 5% of one raw ncclBroadcast of the same bytes, cuda_ipc within 15% of one cudaMemcpy; the
// nccl channel's extra memory at most two buckets per side.
inline constexpr double kMaxNcclToBroadcastRatio = 1.05;
inline constexpr double kMaxIpcToMemcpyRatio = 1.15;
inline constexpr double kMaxNcclExtraBuckets = 2.0;

struct GpuBenchConfig {
  ModeOptions mode;
  std::vector<std::string> channels{"nccl", "cuda_ipc"};
  bool channelsGiven = false;  // --channel named: a channel the machine cannot run is an error, not a skip
  std::vector<std::string> models{"qwen2.5-7b", "qwen3-30b-a3b"};
  std::size_t receivers = 0;  // 0: nccl, one per other visible GPU; cuda_ipc, one
  std::vector<int> ipcDevices{0, 0};  // cuda_ipc: the sender's device, the receivers'
  // nccl: one measurement per size; cuda_ipc: the first. 1 GiB: vLLM's weight-sync buffers (2 x 1 GiB).
  std::vector<std::uint64_t> bucketMiB{1024};
  std::size_t warmup = 2;
  std::size_t repetitions = 10;
  std::string allocation = "tensor";  // "tensor": one cudaMalloc per tensor; "torch": PyTorch's caching segments
  void quick() { models = {"qwen2.5-7b"}; warmup = 1; repetitions = 3; }
};

// The rank processes (hidden subcommand agent-gpu-rank): rank 0 is the sender, ranks 1..world-1 the receivers. Each
// allocates the model's tensors on its device, then follows the benchmark's commands (gpu_rank_protocol.hpp): the
// raw baseline's buffers and communicator, the channel, and every round, timed with CLOCK_MONOTONIC (one clock for
// every process of the host) from a start time the benchmark gives all ranks alike.
struct GpuRankOptions {
  std::string channel;  // "nccl" or "cuda_ipc"
  std::uint32_t rank = 0;
  std::uint32_t world = 0;  // sender + receivers
  int device = 0;
  int baselineDevice = 0;   // cuda_ipc sender: where the memcpy baseline's destination lives
  std::string model;        // a name cli::modelTensors knows
  std::string allocation;   // "tensor" or "torch" (device_memory.hpp)
  std::string segment;      // cuda_ipc: the segment the benchmark created
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GpuRankOptions, channel, rank, world, device, baselineDevice, model, allocation,
                                   segment)
int runGpuRank(const GpuRankOptions& options);

// The host, CUDA and NCCL versions, NCCL_* environment and GPUs a result was measured with, for the report's machine
// table; read without a CUDA context (no device memory is taken in the benchmark process).
Json describeGpus();

// `bytes` (10^9 a GB) per second at the median of round times in milliseconds.
inline double gigabytesPerSecond(const Summary& milliseconds, std::uint64_t bytes) {
  return milliseconds.median > 0 ? static_cast<double>(bytes) / (milliseconds.median * 1e-3) / 1e9 : 0;
}

// Device memory on one GPU of a measurement, from cudaMemGetInfo in the ranks on it (device-wide figures).
struct DeviceMemoryUse {
  int device = 0;
  std::string side{};                // "sender", "receiver 2", "sender + 1 receiver"
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
  std::uint32_t buckets = 0;  // of the plan
  std::size_t receivers = 0;
  std::vector<int> devices;   // by rank: the sender's first
  std::size_t senderAllocations = 0;

  // nccl: from the common start until the last rank's send/receive returned; cuda_ipc: send() from its call to its
  // return (it returns once every receiver has copied and the digests agree).
  Summary channelRound;
  Summary senderReturn;  // nccl: from the common start until the sender's send() returned
  // nccl: one ncclBroadcast of the model's bytes, timed like the channel; cuda_ipc: one cudaMemcpy (cudaMemcpyPeer
  // across GPUs) of them, wall clock in the sender.
  Summary baselineRound;
  Summary baselineGpu;  // the same, between CUDA events on the sender's stream
  std::uint64_t baselineChunkBytes = 0;  // the baseline buffer; smaller than the model when memory was short
  std::size_t baselineCalls = 0;         // broadcasts or copies per round (1 unless memory was short)
  std::string baselineSkipped;           // why there was no baseline; empty when there was one

  std::size_t digestsCompared = 0;  // receivers x channel rounds, warm-up included
  std::size_t digestsEqual = 0;     // a receiver's digest and byte count equal to the sender's

  std::vector<DeviceMemoryUse> memory;
  double maxLateStartMs = 0;  // the latest any rank began a round after the common start

  // cuda_ipc: handles a receiver had open after its first transfer and after its last, and the sender's export
  // generation at the end (1: the tables were written once).
  std::uint32_t handlesAfterFirst = 0;
  std::uint32_t handlesAtEnd = 0;
  std::uint64_t exportGeneration = 0;

  std::string skipped;  // why the measurement did not run; empty when it did

  double ratio() const { return baselineRound.median > 0 ? channelRound.median / baselineRound.median : 0; }
  bool digestsAllEqual() const { return digestsCompared > 0 && digestsEqual == digestsCompared; }
};

struct GpuResults {
  std::vector<GpuMeasurement> nccl;
  std::vector<GpuMeasurement> cudaIpc;
  std::vector<std::string> notes;  // channels left out and why
};

// Throws BenchFailure when there is no GPU, when a rank fails or goes silent (the others are stopped first).
GpuResults measureGpus(const GpuBenchConfig& config, const Json& gpus, std::ostream& progress);

void runGpuBenchmark(const GpuBenchConfig& config, Report& report);

}  // namespace wsync::bench
