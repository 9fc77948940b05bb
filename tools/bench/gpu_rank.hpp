#pragma once
// The rank processes of `wsync-bench gpu` (hidden subcommand agent-gpu-rank): rank 0 is the sender, ranks
// 1..world-1 the receivers. Each allocates the model's tensors on its device, then follows the benchmark's commands
// (gpu_rank_protocol.hpp): the raw baseline's buffers and communicator, the channel, and every round, timed with
// CLOCK_MONOTONIC (one clock for every process of the host) from a start time the benchmark gives all ranks alike.
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace wsync::bench {

struct GpuRankOptions {
  pid_t parent = 0;     // the benchmark; the rank dies with it
  std::string channel;  // "nccl" or "cuda_ipc"
  std::uint32_t rank = 0;
  std::uint32_t world = 0;  // sender + receivers
  int device = 0;
  int baselineDevice = 0;   // cuda_ipc sender: where the memcpy baseline's destination lives
  std::string model;        // a name cli::modelTensors knows
  std::string allocation;   // "tensor" or "torch" (device_memory.hpp)
  std::string segment;      // cuda_ipc: the segment the benchmark created
};

int runGpuRank(const GpuRankOptions& options);

}  // namespace wsync::bench
