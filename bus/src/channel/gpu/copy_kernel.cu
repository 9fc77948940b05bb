#include "channel/gpu/copy_kernel.hpp"

#include <algorithm>

namespace wsync::bus::gpu::detail {
namespace {

// The checksum's constants as scalars: device code reads scalar constexpr values, not host arrays.
constexpr std::uint32_t kMulW0 = device_checksum::kMulW[0], kMulW1 = device_checksum::kMulW[1];
constexpr std::uint32_t kMulH0 = device_checksum::kMulH[0], kMulH1 = device_checksum::kMulH[1];
constexpr std::uint32_t kMulT0 = device_checksum::kMulT[0], kMulT1 = device_checksum::kMulT[1];
constexpr std::uint32_t kSeed0 = device_checksum::kSeed[0], kSeed1 = device_checksum::kSeed[1];
constexpr std::uint32_t kSeedB0 = device_checksum::kSeedB[0], kSeedB1 = device_checksum::kSeedB[1];

// addDeviceChecksumWord, on the device.
__device__ __forceinline__ void fold(std::uint64_t& sum0, std::uint64_t& sum1, std::uint32_t tensorKey0,
                                     std::uint32_t tensorKey1, std::uint64_t word, std::uint64_t value) {
  const auto lo = static_cast<std::uint32_t>(value);
  const auto hi = static_cast<std::uint32_t>(value >> 32);
  const auto wordLo = static_cast<std::uint32_t>(word);
  const auto wordHi = static_cast<std::uint32_t>(word >> 32);
  const std::uint32_t ka0 = (wordLo * kMulW0) ^ (wordHi * kMulH0) ^ tensorKey0;
  const std::uint32_t kb0 = __funnelshift_l(ka0, ka0, 16) ^ kSeedB0;
  sum0 += static_cast<std::uint64_t>(lo + ka0) * (hi + kb0);
  const std::uint32_t ka1 = (wordLo * kMulW1) ^ (wordHi * kMulH1) ^ tensorKey1;
  const std::uint32_t kb1 = __funnelshift_l(ka1, ka1, 16) ^ kSeedB1;
  sum1 += static_cast<std::uint64_t>(lo + ka1) * (hi + kb1);
}

// Up to 8 bytes at `src` as a little-endian word, zero-padded; byte loads: src may have any alignment.
__device__ __forceinline__ std::uint64_t loadWord(const unsigned char* src, std::uint64_t bytes) {
  std::uint64_t value = 0;
  for (std::uint64_t index = 0; index < bytes; ++index) value |= static_cast<std::uint64_t>(src[index]) << (8 * index);
  return value;
}

__device__ __forceinline__ void storeWord(unsigned char* dst, std::uint64_t value, std::uint64_t bytes) {
  for (std::uint64_t index = 0; index < bytes; ++index) dst[index] = static_cast<unsigned char>(value >> (8 * index));
}

__global__ void __launch_bounds__(kCopyThreads) copyRunsKernel(const CopyRun* runs, const std::uint32_t* chunkRuns,
                                                              std::uint32_t chunkCount, DeviceChecksumSums* sums,
                                                              CopyReport report) {
  std::uint64_t sum0 = 0;
  std::uint64_t sum1 = 0;
  for (std::uint32_t chunk = blockIdx.x; chunk < chunkCount; chunk += gridDim.x) {
    const CopyRun run = runs[chunkRuns[chunk]];  // the same address for every thread: one broadcast load
    const std::uint64_t begin = std::uint64_t{chunk - run.firstChunk} * kCopyChunkBytes;
    const std::uint64_t end = begin + kCopyChunkBytes < run.bytes ? begin + kCopyChunkBytes : run.bytes;
    const std::uint32_t key0 = (run.tensor * kMulT0) ^ kSeed0;
    const std::uint32_t key1 = (run.tensor * kMulT1) ^ kSeed1;
    const auto* src = reinterpret_cast<const unsigned char*>(run.src) + begin;
    auto* dst = run.dst != 0 ? reinterpret_cast<unsigned char*>(run.dst) + begin : nullptr;
    const std::uint64_t firstWord = run.firstWord + begin / 8;
    const std::uint64_t bytes = end - begin;

    std::uint64_t vectorBytes = 0;
    if (((run.src | run.dst) & 15U) == 0) {
      // The common case (cudaMalloc blocks and bucket offsets are 256-byte aligned): 16-byte loads and stores.
      const std::uint64_t vectors = bytes / 16;
      const auto* srcVectors = reinterpret_cast<const uint4*>(src);
      auto* dstVectors = reinterpret_cast<uint4*>(dst);
      // Four loads in flight per thread down to the run's last vector: the last, partial round of a run (a 44 KB
      // tensor is one round of 32 KiB and a third) keeps as many bytes in flight per thread as a full one.
      for (std::uint64_t index = threadIdx.x; index < vectors; index += 4 * kCopyThreads) {
        uint4 values[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (index + k * kCopyThreads < vectors) values[k] = srcVectors[index + k * kCopyThreads];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (index + k * kCopyThreads >= vectors) break;
          if (dstVectors != nullptr) dstVectors[index + k * kCopyThreads] = values[k];
          const std::uint64_t word = firstWord + 2 * (index + k * kCopyThreads);
          fold(sum0, sum1, key0, key1, word, (std::uint64_t{values[k].y} << 32) | values[k].x);
          fold(sum0, sum1, key0, key1, word + 1, (std::uint64_t{values[k].w} << 32) | values[k].z);
        }
      }
      vectorBytes = vectors * 16;
    }
    // What the vectors did not cover (all of it for unaligned addresses): a word per thread, byte by byte.
    for (std::uint64_t offset = vectorBytes + 8 * threadIdx.x; offset < bytes; offset += 8 * kCopyThreads) {
      const std::uint64_t wordBytes = bytes - offset < 8 ? bytes - offset : 8;
      const std::uint64_t value = loadWord(src + offset, wordBytes);
      if (dst != nullptr) storeWord(dst + offset, value, wordBytes);
      fold(sum0, sum1, key0, key1, firstWord + offset / 8, value);
    }
  }
  if (sums == nullptr) return;
  for (int offset = 16; offset > 0; offset /= 2) {
    sum0 += __shfl_down_sync(0xffffffffU, sum0, offset);
    sum1 += __shfl_down_sync(0xffffffffU, sum1, offset);
  }
  if ((threadIdx.x & 31U) == 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&sums->lane[0]), static_cast<unsigned long long>(sum0));
    atomicAdd(reinterpret_cast<unsigned long long*>(&sums->lane[1]), static_cast<unsigned long long>(sum1));
  }
  if (report.host == nullptr) return;
  // The last block to finish (every block's additions made visible before it counts itself) moves the sums to the
  // host and leaves the device words at 0 for the next launch, which the stream orders after this one.
  __shared__ bool lastBlock;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    lastBlock = atomicAdd(report.doneBlocks, 1U) == gridDim.x - 1;
  }
  __syncthreads();
  if (!lastBlock || threadIdx.x != 0) return;
  __threadfence();
  const auto lane0 = atomicExch(reinterpret_cast<unsigned long long*>(&sums->lane[0]), 0ULL);
  const auto lane1 = atomicExch(reinterpret_cast<unsigned long long*>(&sums->lane[1]), 0ULL);
  *report.doneBlocks = 0;
  volatile HostCopyReport* host = report.host;
  host->lane[0] = lane0;
  host->lane[1] = lane1;
  __threadfence_system();  // the lanes reach the host before the sequence that vouches for them
  host->sequence = report.sequence;
}

}  // namespace

cudaError_t loadCopyKernel() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, copyRunsKernel);
}

cudaError_t launchCopyRuns(const CopyRun* runs, const std::uint32_t* chunkRuns, std::uint32_t chunkCount,
                           DeviceChecksumSums* sums, CopyReport report, std::uint32_t maxBlocks, cudaStream_t stream) {
  // A reporting launch runs even with nothing to copy: its report is what the host waits for.
  if (chunkCount == 0 && report.host == nullptr) return cudaSuccess;
  if (report.host != nullptr && sums == nullptr) return cudaErrorInvalidValue;
  const std::uint32_t blocks = std::max<std::uint32_t>(1, std::min(chunkCount, maxBlocks));
  copyRunsKernel<<<blocks, kCopyThreads, 0, stream>>>(runs, chunkRuns, chunkCount, sums, report);
  return cudaGetLastError();
}

}  // namespace wsync::bus::gpu::detail
