#pragma once
// Private to bus/gpu: the one kernel every GPU channel moves bytes with. It copies a batch of runs (contiguous
// byte ranges of tensors) and folds the device checksum (wsync/bus/device_checksum.hpp) of what it reads, all runs
// in one launch: thousands of tensors cost one launch, not thousands.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "wsync/bus/channel/device_checksum.hpp"

namespace wsync::bus::gpu::detail {

// Work is handed to blocks in chunks of this many bytes of one run: large enough that a block's setup is paid
// back, small enough that a few big tensors still spread over every block.
inline constexpr std::uint64_t kCopyChunkBytes = 128 * 1024;
// Threads per block of the copy kernel: 128 KiB chunks are 16 vectors of 16 bytes per thread.
inline constexpr unsigned kCopyThreads = 512;
// A run shorter than this is copied by one warp, not a block: a block's threads would have fewer than four vectors
// in flight each, most of them none.
inline constexpr std::uint64_t kWarpChunkBytes = 4 * 16 * kCopyThreads;

// One contiguous run, as the kernel reads it (plain data, uploaded as is).
struct CopyRun {
  std::uint64_t src = 0;  // device address of the run's first byte
  std::uint64_t dst = 0;  // where to copy it; 0: only fold the checksum
  std::uint64_t bytes = 0;
  std::uint64_t firstWord = 0;   // the run's first byte / 8 within its tensor (runs start at multiples of 8)
  std::uint32_t tensor = 0;      // index in the manifest: part of the checksum's key
  std::uint32_t firstChunk = 0;  // chunks of the batch's runs before this one
  std::uint64_t reserved = 0;
};
static_assert(sizeof(CopyRun) == 48);

// What a launch's last block writes to host memory (pinned and mapped): the launch's checksum lanes, then its
// sequence number. The host sees the copy's end by reading it, where an event and a copy of the lanes back would
// each be one more submission to the GPU after the kernel (channel/gpu/copy_reporter.hpp).
struct HostCopyReport {
  std::uint64_t lane[2] = {0, 0};
  std::uint64_t sequence = 0;  // written last, after a system-wide fence
  std::uint64_t reserved = 0;
};
static_assert(sizeof(HostCopyReport) == 32);

// Where and as what a launch reports; `host` null: it does not. A reporting launch's `sums` start at 0 and are 0
// again when it ends (its last block moves them to the report), as is `doneBlocks`.
struct CopyReport {
  HostCopyReport* host = nullptr;       // device address of the host-mapped report
  std::uint32_t* doneBlocks = nullptr;  // device memory: blocks of the launch that finished
  std::uint64_t sequence = 0;
};

// Copies (and checksums) runs split in `chunkCount` chunks; chunkRuns[c] is the run of chunk c. The first
// `blockChunks` chunks are a block's each, the rest (runs shorter than kWarpChunkBytes, a chunk each) a warp's.
// `sums` (device memory, may be null) receives the lanes' sums by atomic addition. At most `maxBlocks` blocks. With a
// report (and sums), the last block to finish hands the sums over to it.
cudaError_t launchCopyRuns(const CopyRun* runs, const std::uint32_t* chunkRuns, std::uint32_t blockChunks,
                           std::uint32_t chunkCount, DeviceChecksumSums* sums, CopyReport report,
                           std::uint32_t maxBlocks, cudaStream_t stream);

// Loads the kernel's module now. CUDA loads modules lazily at the first launch, and that first launch can wait for
// kernels already running on the device: behind an NCCL kernel spinning on a dead peer it would never return, out of
// the watchdog's reach. Channels call this when they open.
cudaError_t loadCopyKernel();

}  // namespace wsync::bus::gpu::detail
