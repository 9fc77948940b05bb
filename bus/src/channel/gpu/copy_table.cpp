#include "channel/gpu/copy_table.hpp"

#include "channel/gpu/cuda_check.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus::gpu::detail {

CopyTable::~CopyTable() {
  cudaFree(deviceRuns_);
  cudaFree(deviceChunkRuns_);
}

void CopyTable::clear() {
  runs_.clear();
  chunkRuns_.clear();
  batches_.clear();
  shortRuns_.clear();
}

void CopyTable::beginBatch() {
  closeBatch();
  batches_.push_back(Batch{.firstRun = static_cast<std::uint32_t>(runs_.size()),
                           .firstChunk = static_cast<std::uint32_t>(chunkRuns_.size())});
}

void CopyTable::add(std::uint64_t src, std::uint64_t dst, std::uint64_t bytes, std::uint32_t tensor,
                    std::uint64_t tensorOffset) {
  if (bytes == 0) return;
  Batch& batch = batches_.back();
  const auto runInBatch = static_cast<std::uint32_t>(runs_.size() - batch.firstRun);
  runs_.push_back(CopyRun{.src = src, .dst = dst, .bytes = bytes, .firstWord = tensorOffset / 8, .tensor = tensor});
  batch.bytes += bytes;
  if (bytes < kWarpChunkBytes) {  // a warp's chunk, after the blocks' (closeBatch)
    shortRuns_.push_back(runInBatch);
    return;
  }
  const auto chunks = static_cast<std::uint32_t>((bytes + kCopyChunkBytes - 1) / kCopyChunkBytes);
  runs_.back().firstChunk = batch.chunkCount;
  chunkRuns_.insert(chunkRuns_.end(), chunks, runInBatch);
  batch.chunkCount += chunks;
  batch.blockChunks = batch.chunkCount;
}

void CopyTable::closeBatch() {
  if (batches_.empty()) return;
  Batch& batch = batches_.back();
  for (const std::uint32_t run : shortRuns_) {
    runs_[batch.firstRun + run].firstChunk = batch.chunkCount;
    chunkRuns_.push_back(run);
    ++batch.chunkCount;
  }
  shortRuns_.clear();
}

tl::expected<void, ChannelFailure> CopyTable::uploadIfChanged() {
  closeBatch();
  StreamDigest digest;
  digest.add(reinterpret_cast<const std::byte*>(runs_.data()), runs_.size() * sizeof(CopyRun));
  digest.add(reinterpret_cast<const std::byte*>(chunkRuns_.data()), chunkRuns_.size() * sizeof(std::uint32_t));
  const Digest described = digest.digest();
  if (uploaded_ == described) return {};
  uploaded_.reset();
  if (auto done = upload(); !done) return done;
  uploaded_ = described;
  return {};
}

tl::expected<void, ChannelFailure> CopyTable::upload() {
  closeBatch();
  uploaded_.reset();
  if (runs_.size() > runCapacity_) {
    cudaFree(deviceRuns_);
    deviceRuns_ = nullptr;
    runCapacity_ = 0;
    WSYNC_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&deviceRuns_), runs_.size() * sizeof(CopyRun)));
    runCapacity_ = runs_.size();
  }
  if (chunkRuns_.size() > chunkCapacity_) {
    cudaFree(deviceChunkRuns_);
    deviceChunkRuns_ = nullptr;
    chunkCapacity_ = 0;
    WSYNC_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&deviceChunkRuns_), chunkRuns_.size() * sizeof(std::uint32_t)));
    chunkCapacity_ = chunkRuns_.size();
  }
  if (!runs_.empty()) {
    WSYNC_CUDA_TRY(cudaMemcpy(deviceRuns_, runs_.data(), runs_.size() * sizeof(CopyRun), cudaMemcpyHostToDevice));
  }
  if (!chunkRuns_.empty()) {
    WSYNC_CUDA_TRY(cudaMemcpy(deviceChunkRuns_, chunkRuns_.data(), chunkRuns_.size() * sizeof(std::uint32_t),
                              cudaMemcpyHostToDevice));
  }
  return {};
}

tl::expected<void, ChannelFailure> CopyTable::launch(std::size_t batch, DeviceChecksumSums* sums, CopyReport report,
                                                     std::uint32_t maxBlocks, cudaStream_t stream) const {
  const Batch& entry = batches_[batch];
  WSYNC_CUDA_TRY(launchCopyRuns(deviceRuns_ + entry.firstRun, deviceChunkRuns_ + entry.firstChunk, entry.blockChunks,
                                entry.chunkCount, sums, report, maxBlocks, stream));
  return {};
}

}  // namespace wsync::bus::gpu::detail
