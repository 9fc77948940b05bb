// The content `wsync-bench gpu` moves, written on the device (61 GB is never built on the host): word `w` of tensor
// `t` at version `v` is word(key(seed, t, v), w), so every word changes from one version to the next; a size not a
// multiple of 8 ends with the low bytes of the next word.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace wsync::bench {
namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;  // 2^64 / phi, splitmix64's increment
constexpr std::uint64_t kTensorStep = 0xD1B54A32D192ED03ULL;
constexpr unsigned kFillThreads = 256;
// Enough blocks to fill every SM of an H200 several times over; a grid-stride loop does the rest.
constexpr std::uint64_t kMaxFillBlocks = 4096;

// splitmix64's finaliser: consecutive inputs give outputs that look independent.
__host__ __device__ std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__device__ std::uint64_t word(std::uint64_t key, std::uint64_t index) { return mix64(key + index * kGolden); }

__global__ void fillContent(std::uint64_t* words, std::uint64_t wordCount, unsigned tailBytes, std::uint64_t key) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t index = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; index < wordCount; index += stride) {
    words[index] = word(key, index);
  }
  if (tailBytes != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    const std::uint64_t last = word(key, wordCount);
    auto* tail = reinterpret_cast<unsigned char*>(words + wordCount);
    for (unsigned byte = 0; byte < tailBytes; ++byte) tail[byte] = static_cast<unsigned char>(last >> (8 * byte));
  }
}

// The engine's next step, as small as a kernel gets: one thread bumping a word of the rank's own.
__global__ void bumpWord(std::uint32_t* word) { *word += 1; }

}  // namespace

// Enqueues one kernel of a single thread in the calling process's context (GpuRank's "step" command): on a GPU the
// sender's process shares, it shows what the receiving process waits before its own work runs after a transfer.
cudaError_t launchStep(std::uint32_t* word, cudaStream_t stream) {
  bumpWord<<<1, 1, 0, stream>>>(word);
  return cudaGetLastError();
}

// Enqueues version `version` of tensor `tensor`'s content into `bytes` bytes at `data` (8-byte aligned device memory).
cudaError_t launchContentFill(void* data, std::uint64_t bytes, std::uint64_t seed, std::uint32_t tensor,
                              std::uint64_t version, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const std::uint64_t key = mix64(mix64(seed ^ (version * kGolden)) + (std::uint64_t{tensor} + 1) * kTensorStep);
  const std::uint64_t wordCount = bytes / 8;
  std::uint64_t blocks = (wordCount + kFillThreads - 1) / kFillThreads;
  blocks = blocks == 0 ? 1 : (blocks > kMaxFillBlocks ? kMaxFillBlocks : blocks);
  fillContent<<<static_cast<unsigned>(blocks), kFillThreads, 0, stream>>>(static_cast<std::uint64_t*>(data), wordCount,
                                                                          static_cast<unsigned>(bytes % 8), key);
  return cudaGetLastError();
}

}  // namespace wsync::bench
