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

// Up to 8 bytes at `src` as a little-endian word, zero-padded: one load for a whole word at a multiple of 8 (the
// first word of a run 8 bytes past a 16-byte boundary) or for 4 bytes at a multiple of 4 (the last 4 bytes of a
// tensor 4 bytes longer than a multiple of 16, in a block of its own as torch allocates it), else bytes. Four byte
// loads are issued before any is used, so a word costs two memory latencies, not eight (all eight at once would take
// the kernel past 64 registers). Covering more cases (8 bytes as two 4-byte parts) cost the shifted-vector loops more,
// by the code it added, than it saved (docs/gpu-channels.md).
__device__ __forceinline__ std::uint64_t loadWord(const unsigned char* src, std::uint64_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(src);
  if (bytes == 8 && (address & 7U) == 0) return *reinterpret_cast<const std::uint64_t*>(src);
  if (bytes == 4 && (address & 3U) == 0) return *reinterpret_cast<const std::uint32_t*>(src);
  std::uint64_t value = 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    std::uint32_t loaded[4];
#pragma unroll
    for (int index = 0; index < 4; ++index) {
      const int at = 4 * half + index;
      loaded[index] = static_cast<std::uint64_t>(at) < bytes ? src[at] : 0U;
    }
    const std::uint32_t part = loaded[0] | (loaded[1] << 8) | (loaded[2] << 16) | (loaded[3] << 24);
    value |= static_cast<std::uint64_t>(part) << (32 * half);
  }
  return value;
}

// Stores `bytes` bytes of `value` at dst + offset, leaving out those in [skipBegin, skipEnd) (written by another path).
// A word wholly outside that range goes in one store where loadWord reads it with one load.
__device__ __forceinline__ void storeOutside(unsigned char* dst, std::uint64_t offset, std::uint64_t value,
                                             std::uint64_t bytes, std::uint64_t skipBegin, std::uint64_t skipEnd) {
  if (offset >= skipEnd || offset + bytes <= skipBegin) {
    const auto address = reinterpret_cast<std::uintptr_t>(dst + offset);
    if (bytes == 8 && (address & 7U) == 0) {
      *reinterpret_cast<std::uint64_t*>(dst + offset) = value;
      return;
    }
    if (bytes == 4 && (address & 3U) == 0) {
      *reinterpret_cast<std::uint32_t*>(dst + offset) = static_cast<std::uint32_t>(value);
      return;
    }
  }
  for (std::uint64_t index = 0; index < bytes; ++index) {
    if (offset + index >= skipBegin && offset + index < skipEnd) continue;
    dst[offset + index] = static_cast<unsigned char>(value >> (8 * index));
  }
}

// Copies (dst may be null: reads only) `vectors` 16-byte vectors and folds them as whole words: vector i holds words
// firstWord + 2i and + 2i + 1. Four loads in flight per thread down to the last vector: the last, partial round of a
// run (a 44 KB tensor is one round of 32 KiB and a third) keeps as many bytes in flight per thread as a full one.
template <unsigned kLanes>
__device__ __forceinline__ void copyVectors(const uint4* src, uint4* dst, std::uint64_t vectors,
                                            std::uint64_t firstWord, std::uint32_t key0, std::uint32_t key1,
                                            std::uint64_t& sum0, std::uint64_t& sum1, unsigned lane) {
  for (std::uint64_t index = lane; index < vectors; index += 4 * kLanes) {
    uint4 values[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (index + k * kLanes < vectors) values[k] = src[index + k * kLanes];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (index + k * kLanes >= vectors) break;
      if (dst != nullptr) dst[index + k * kLanes] = values[k];
      const std::uint64_t word = firstWord + 2 * (index + k * kLanes);
      fold(sum0, sum1, key0, key1, word, (std::uint64_t{values[k].y} << 32) | values[k].x);
      fold(sum0, sum1, key0, key1, word + 1, (std::uint64_t{values[k].w} << 32) | values[k].z);
    }
  }
}

// The same for vectors whose words do not start on a half: each word is the last `carry` bytes of one 8-byte half
// and the first 8 - carry bytes of the next (a tensor 4 bytes past a 16-byte boundary, in a packed buffer on both
// sides). Vector i's halves h0, h1 and the next vector's h0 give words wordBase + 2i and + 2i + 1; the next vector's
// half comes from the next lane, or is read again by a warp's last lane. The last vector's second word needs a half
// past the vectors: the caller folds it. Rounds are whole for the kLanes threads (a block or a warp), so that every
// lane meets the shuffle.
template <unsigned kLanes>
__device__ __forceinline__ void copyShiftedVectors(const uint4* src, uint4* dst, std::uint64_t vectors,
                                                   std::uint64_t wordBase, unsigned carry, std::uint32_t key0,
                                                   std::uint32_t key1, std::uint64_t& sum0, std::uint64_t& sum1,
                                                   unsigned lane) {
  const unsigned down = 8 * (8 - carry);
  const unsigned up = 8 * carry;
  const bool lastLane = (lane & 31U) == 31U;
  for (std::uint64_t round = 0; round < vectors; round += 4 * kLanes) {
    uint4 values[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const std::uint64_t index = round + lane + k * kLanes;
      values[k] = index < vectors ? src[index] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const std::uint64_t index = round + lane + k * kLanes;
      const std::uint64_t low = (std::uint64_t{values[k].y} << 32) | values[k].x;
      const std::uint64_t high = (std::uint64_t{values[k].w} << 32) | values[k].z;
      std::uint64_t nextLow = __shfl_down_sync(0xffffffffU, low, 1);
      if (lastLane && index + 1 < vectors) {
        const uint2 next = reinterpret_cast<const uint2*>(src + index + 1)[0];
        nextLow = (std::uint64_t{next.y} << 32) | next.x;
      }
      if (index >= vectors) continue;
      if (dst != nullptr) dst[index] = values[k];
      fold(sum0, sum1, key0, key1, wordBase + 2 * index, (low >> down) | (high << up));
      if (index + 1 < vectors) fold(sum0, sum1, key0, key1, wordBase + 2 * index + 1, (high >> down) | (nextLow << up));
    }
  }
}

// Copies and folds the whole 8-byte words of `bytes`, each word read and written as 8 / sizeof(Part) parts: the path
// for a source and a destination aligned to sizeof(Part) but at different offsets from 16 bytes. Four words in
// flight per thread: more would take the kernel past 64 registers, and its 2 blocks of 512 threads per SM down to 1
// (ptxas, sm_90). Returns the words it covered.
template <typename Part, unsigned kLanes>
__device__ __forceinline__ std::uint64_t copyWords(const unsigned char* src, unsigned char* dst, std::uint64_t bytes,
                                                   std::uint64_t firstWord, std::uint32_t key0, std::uint32_t key1,
                                                   std::uint64_t& sum0, std::uint64_t& sum1, unsigned lane) {
  constexpr int kParts = 8 / sizeof(Part);
  constexpr int kInFlight = 4;
  const std::uint64_t words = bytes / 8;
  const auto* srcParts = reinterpret_cast<const Part*>(src);
  auto* dstParts = reinterpret_cast<Part*>(dst);
  for (std::uint64_t index = lane; index < words; index += kInFlight * kLanes) {
    std::uint64_t values[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const std::uint64_t word = index + k * kLanes;
      values[k] = 0;
      if (word >= words) continue;
#pragma unroll
      for (int part = 0; part < kParts; ++part) {
        values[k] |= static_cast<std::uint64_t>(srcParts[word * kParts + part]) << (8 * sizeof(Part) * part);
      }
    }
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const std::uint64_t word = index + k * kLanes;
      if (word >= words) break;
      if (dstParts != nullptr) {
#pragma unroll
        for (int part = 0; part < kParts; ++part) {
          dstParts[word * kParts + part] = static_cast<Part>(values[k] >> (8 * sizeof(Part) * part));
        }
      }
      fold(sum0, sum1, key0, key1, firstWord + word, values[k]);
    }
  }
  return words;
}

// Copies and folds chunk `chunk`, with kLanes threads (a block, or a warp: see copyRunsKernel), this one as `lane`.
template <unsigned kLanes>
__device__ __forceinline__ void copyChunk(const CopyRun* runs, const std::uint32_t* chunkRuns, std::uint32_t chunk,
                                          std::uint64_t& sum0, std::uint64_t& sum1, unsigned lane) {
  const CopyRun run = runs[chunkRuns[chunk]];  // the same address for every lane: one broadcast load
  const std::uint64_t begin = std::uint64_t{chunk - run.firstChunk} * kCopyChunkBytes;
  const std::uint64_t end = begin + kCopyChunkBytes < run.bytes ? begin + kCopyChunkBytes : run.bytes;
  const std::uint32_t key0 = (run.tensor * kMulT0) ^ kSeed0;
  const std::uint32_t key1 = (run.tensor * kMulT1) ^ kSeed1;
  // A chunk keeps its run's alignment (chunks start 128 KiB apart), and starts on a word of its tensor.
  const auto* src = reinterpret_cast<const unsigned char*>(run.src) + begin;
  auto* dst = run.dst != 0 ? reinterpret_cast<unsigned char*>(run.dst) + begin : nullptr;
  const std::uint64_t firstWord = run.firstWord + begin / 8;
  const std::uint64_t bytes = end - begin;

  // The fast paths copy bytes [bodyBegin, bodyEnd) and fold words [wordsBegin, wordsEnd) (indices in the chunk);
  // the rest is done a word per thread below.
  std::uint64_t bodyBegin = 0, bodyEnd = 0, wordsBegin = 0, wordsEnd = 0;
  if (run.dst == 0 || ((run.src ^ run.dst) & 15U) == 0) {
    // Source and destination equally far from a 16-byte boundary: 16-byte loads and stores past the first
    // boundary. The common case is 0 (cudaMalloc blocks and bucket offsets are 256-byte aligned); a tensor packed
    // at an odd offset on both sides is the other.
    const std::uint64_t toBoundary = (16U - (run.src & 15U)) & 15U;
    const std::uint64_t head = toBoundary < bytes ? toBoundary : bytes;
    const std::uint64_t vectors = (bytes - head) / 16;
    if (vectors > 0) {
      const auto* srcVectors = reinterpret_cast<const uint4*>(src + head);
      auto* dstVectors = dst != nullptr ? reinterpret_cast<uint4*>(dst + head) : nullptr;
      if (head % 8 == 0) {
        copyVectors<kLanes>(srcVectors, dstVectors, vectors, firstWord + head / 8, key0, key1, sum0, sum1, lane);
      } else {
        copyShiftedVectors<kLanes>(srcVectors, dstVectors, vectors, firstWord + head / 8 + 1,
                                   static_cast<unsigned>(head % 8), key0, key1, sum0, sum1, lane);
      }
      bodyBegin = head;
      bodyEnd = head + 16 * vectors;
      wordsBegin = (head + 7) / 8;
      wordsEnd = head / 8 + 2 * vectors;
    }
  } else if (const std::uint64_t low = (run.src | run.dst) & 7U; low == 0) {
    wordsEnd = copyWords<std::uint64_t, kLanes>(src, dst, bytes, firstWord, key0, key1, sum0, sum1, lane);
  } else if ((low & 3U) == 0) {
    wordsEnd = copyWords<std::uint32_t, kLanes>(src, dst, bytes, firstWord, key0, key1, sum0, sum1, lane);
  } else if ((low & 1U) == 0) {
    wordsEnd = copyWords<std::uint16_t, kLanes>(src, dst, bytes, firstWord, key0, key1, sum0, sum1, lane);
  }
  if (bodyEnd == 0) bodyEnd = 8 * wordsEnd;
  // The words the paths above did not fold (all of them at odd addresses; a tensor's last bytes short of a word;
  // a word across the start or the end of the vectors): a word per thread, one load and one store where its
  // addresses allow and bytes where not, storing only the bytes the vectors did not. The last threads take them:
  // the vectors' last, partial round left them the least work, where the first warp, which had the most, would
  // make the whole block wait for it on every chunk.
  const std::uint64_t words = (bytes + 7) / 8;
  const std::uint64_t outside = wordsBegin + (words - wordsEnd);
  for (std::uint64_t slot = kLanes - 1 - lane; slot < outside; slot += kLanes) {
    const std::uint64_t word = slot < wordsBegin ? slot : wordsEnd + (slot - wordsBegin);
    const std::uint64_t offset = 8 * word;
    const std::uint64_t wordBytes = bytes - offset < 8 ? bytes - offset : 8;
    const std::uint64_t value = loadWord(src + offset, wordBytes);
    if (dst != nullptr) storeOutside(dst, offset, value, wordBytes, bodyBegin, bodyEnd);
    fold(sum0, sum1, key0, key1, firstWord + word, value);
  }
}

// Chunks [0, blockChunks) are a block's each, the rest a warp's: a run shorter than kWarpChunkBytes would keep most
// of a block idle (a 2 KiB row of a tensor-parallel slice is 128 vectors, a quarter of the threads with one load in
// flight each), and a warp takes it with four in flight per lane. Each warp walks its own chunks: were it to pass
// over its block's others, it would pay for their descriptors' loads as well. Two blocks an SM: the warps' path
// takes the kernel past the 64 registers a thread that leave room for a second block, and the copy wants every warp
// in flight more than it minds a few spilled registers outside its loops.
__global__ void __launch_bounds__(kCopyThreads, 2)
    copyRunsKernel(const CopyRun* runs, const std::uint32_t* chunkRuns, std::uint32_t blockChunks,
                   std::uint32_t chunkCount, DeviceChecksumSums* sums, CopyReport report) {
  std::uint64_t sum0 = 0;
  std::uint64_t sum1 = 0;
  for (std::uint32_t chunk = blockIdx.x; chunk < blockChunks; chunk += gridDim.x) {
    copyChunk<kCopyThreads>(runs, chunkRuns, chunk, sum0, sum1, threadIdx.x);
  }
  constexpr unsigned kWarps = kCopyThreads / 32;
  const std::uint32_t warps = gridDim.x * kWarps;
  for (std::uint32_t chunk = blockChunks + blockIdx.x * kWarps + threadIdx.x / 32; chunk < chunkCount; chunk += warps) {
    copyChunk<32>(runs, chunkRuns, chunk, sum0, sum1, threadIdx.x & 31U);
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

cudaError_t launchCopyRuns(const CopyRun* runs, const std::uint32_t* chunkRuns, std::uint32_t blockChunks,
                           std::uint32_t chunkCount, DeviceChecksumSums* sums, CopyReport report,
                           std::uint32_t maxBlocks, cudaStream_t stream) {
  // A reporting launch runs even with nothing to copy: its report is what the host waits for.
  if (chunkCount == 0 && report.host == nullptr) return cudaSuccess;
  if (report.host != nullptr && sums == nullptr) return cudaErrorInvalidValue;
  // As many blocks as the chunks can keep busy: a block takes one of the first, a warp one of the rest.
  constexpr std::uint32_t kWarps = kCopyThreads / 32;
  const std::uint32_t wanted = blockChunks + (chunkCount - blockChunks + kWarps - 1) / kWarps;
  const std::uint32_t blocks = std::max<std::uint32_t>(1, std::min(wanted, maxBlocks));
  copyRunsKernel<<<blocks, kCopyThreads, 0, stream>>>(runs, chunkRuns, blockChunks, chunkCount, sums, report);
  return cudaGetLastError();
}

}  // namespace wsync::bus::gpu::detail
