#pragma once
// Private to bus/gpu: batches of copy runs in device memory, built on the host once per layout and reused by every
// transfer with that layout (a round's per-tensor host work is then a comparison of the layout's key).
#include <cstdint>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>
#include <tl/expected.hpp>

#include "channel/gpu/copy_kernel.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::bus::gpu::detail {

class CopyTable {
 public:
  CopyTable() = default;
  ~CopyTable();
  CopyTable(const CopyTable&) = delete;
  CopyTable& operator=(const CopyTable&) = delete;

  // Host side: forget every batch, then describe new ones (each whole before the upload: a batch's blocks' chunks
  // come first, its warps' after them).
  void clear();
  void beginBatch();
  // A run of `bytes` of tensor `tensor` starting at byte `tensorOffset` (a multiple of 8) of the tensor.
  void add(std::uint64_t src, std::uint64_t dst, std::uint64_t bytes, std::uint32_t tensor, std::uint64_t tensorOffset);
  // Copies the description to the device (growing the device arrays if needed) and waits for the copy.
  tl::expected<void, ChannelFailure> upload();
  // upload(), unless the device holds this description already (the last upload's, by XXH3-128 of the host
  // arrays): a layout described again every round costs its host work, not a copy to the device.
  tl::expected<void, ChannelFailure> uploadIfChanged();

  std::size_t batchCount() const { return batches_.size(); }
  std::uint64_t batchBytes(std::size_t batch) const { return batches_[batch].bytes; }
  // Enqueues batch `batch` on `stream`, folding its checksum into `sums` (device memory; may be null), and
  // reporting its end to `report` (launchCopyRuns; report.host null: no report).
  tl::expected<void, ChannelFailure> launch(std::size_t batch, DeviceChecksumSums* sums, CopyReport report,
                                            std::uint32_t maxBlocks, cudaStream_t stream) const;
  std::uint64_t deviceBytes() const { return runCapacity_ * sizeof(CopyRun) + chunkCapacity_ * sizeof(std::uint32_t); }

 private:
  struct Batch {
    std::uint32_t firstRun = 0;
    std::uint32_t firstChunk = 0;  // into the chunk table
    std::uint32_t chunkCount = 0;
    std::uint32_t blockChunks = 0;  // the first chunks, a block's each; the rest are a warp's (launchCopyRuns)
    std::uint64_t bytes = 0;
  };

  // Puts the open batch's short runs' chunks after its blocks' chunks.
  void closeBatch();

  std::vector<CopyRun> runs_;
  std::vector<std::uint32_t> chunkRuns_;  // run index within its batch, one per chunk
  std::vector<Batch> batches_;
  std::vector<std::uint32_t> shortRuns_;  // the open batch's runs shorter than kWarpChunkBytes, in its numbering
  CopyRun* deviceRuns_ = nullptr;
  std::uint32_t* deviceChunkRuns_ = nullptr;
  std::size_t runCapacity_ = 0;
  std::size_t chunkCapacity_ = 0;
  std::optional<Digest> uploaded_;  // of the description the device holds (uploadIfChanged)
};

}  // namespace wsync::bus::gpu::detail
