#pragma once
// The measurements of `wsync-bench gpu`: the nccl and cuda_ipc channels between rank processes of this executable
// (gpu_config.hpp), each beside its raw baseline in the same processes, interleaved round by round: one ncclBroadcast
// of the model's bytes from one contiguous buffer (nccl), one cudaMemcpy of them between two contiguous buffers
// (cuda_ipc).
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gpu_config.hpp"
#include "gpu_info.hpp"
#include "stats.hpp"

namespace wsync::bench {

// Round times of one path over the timed rounds are Summaries in milliseconds; this is `bytes` per second at the
// median, in GB/s (10^9 bytes).
inline double gigabytesPerSecond(const Summary& milliseconds, std::uint64_t bytes) {
  return milliseconds.median > 0 ? static_cast<double>(bytes) / (milliseconds.median * 1e-3) / 1e9 : 0;
}

// Device memory on one GPU of a measurement, from cudaMemGetInfo in the ranks on it (device-wide figures).
struct DeviceMemoryUse {
  int device = 0;
  std::string side;                  // "sender", "receiver 2", "sender + 1 receiver"
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
  std::string allocation;     // "tensor" or "torch"
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
  std::string hostCheck;            // "equal", "differs", "off"

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

// Progress lines go to `progress`. Throws BenchFailure when there is no GPU, when a rank fails or goes silent (the
// other ranks are stopped first), and on an interruption.
GpuResults measureGpus(const GpuBenchConfig& config, const GpuInfo& gpus, std::ostream& progress);

}  // namespace wsync::bench
