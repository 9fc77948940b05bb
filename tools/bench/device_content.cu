#include "device_content.hpp"

namespace wsync::bench {
namespace {

constexpr unsigned kFillThreads = 256;
// Enough blocks to fill every SM of an H200 several times over; a grid-stride loop does the rest.
constexpr std::uint64_t kMaxFillBlocks = 4096;

__global__ void fillContent(std::uint64_t* words, std::uint64_t wordCount, unsigned tailBytes, std::uint64_t key) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t index = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; index < wordCount;
       index += stride) {
    words[index] = device_content::word(key, index);
  }
  if (tailBytes != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    const std::uint64_t last = device_content::word(key, wordCount);
    auto* tail = reinterpret_cast<unsigned char*>(words + wordCount);
    for (unsigned byte = 0; byte < tailBytes; ++byte) tail[byte] = static_cast<unsigned char>(last >> (8 * byte));
  }
}

}  // namespace

cudaError_t launchContentFill(void* data, std::uint64_t bytes, std::uint64_t key, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const std::uint64_t wordCount = bytes / 8;
  std::uint64_t blocks = (wordCount + kFillThreads - 1) / kFillThreads;
  blocks = blocks == 0 ? 1 : (blocks > kMaxFillBlocks ? kMaxFillBlocks : blocks);
  fillContent<<<static_cast<unsigned>(blocks), kFillThreads, 0, stream>>>(
      static_cast<std::uint64_t*>(data), wordCount, static_cast<unsigned>(bytes % 8), key);
  return cudaGetLastError();
}

}  // namespace wsync::bench
