#include "device_memory.hpp"

#include <utility>

#include <wsync/bus/channel/device_block.hpp>

#include "device_content.hpp"

namespace wsync::bench {
namespace {

// PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp): kMinBlockSize, kSmallSize, kSmallBuffer,
// kMinLargeAlloc, kLargeBuffer, kRoundLarge.
constexpr std::uint64_t kTorchMinBlock = 512;
constexpr std::uint64_t kTorchSmallSize = std::uint64_t{1} << 20;
constexpr std::uint64_t kTorchSmallSegment = std::uint64_t{2} << 20;
constexpr std::uint64_t kTorchMinLargeAlloc = std::uint64_t{10} << 20;
constexpr std::uint64_t kTorchLargeSegment = std::uint64_t{20} << 20;
constexpr std::uint64_t kTorchRoundLarge = std::uint64_t{2} << 20;

std::uint64_t roundUp(std::uint64_t value, std::uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The segment a pool carves its blocks from, and how much of it is taken.
struct OpenSegment {
  std::byte* base = nullptr;
  std::uint64_t used = 0;
  std::uint64_t capacity = 0;
};

}  // namespace

void throwIfCudaFailed(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return;
  cudaGetLastError();  // a failed call leaves a non-sticky error behind: clear it for the next check
  throw BenchFailure(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

bus::DeviceBlock allocateDevice(int device, std::uint64_t bytes, const std::string& what) {
  auto block = bus::DeviceBlock::allocate(device, bytes);
  if (block) return std::move(*block);
  // A failed cudaMalloc leaves its error as the runtime's last one: out of memory is a skip, anything else a failure.
  if (cudaGetLastError() == cudaErrorMemoryAllocation) {
    std::size_t free = 0;
    std::size_t total = 0;
    cudaMemGetInfo(&free, &total);
    throw DeviceMemoryShort("cudaMalloc of " + std::to_string(bytes) + " bytes for " + what + " on GPU " +
                            std::to_string(device) + ": out of memory (" + std::to_string(free >> 20) +
                            " MiB free of " + std::to_string(total >> 20) + " MiB)");
  }
  throw BenchFailure(what + ": " + block.error());
}

DeviceAllocation deviceAllocationFromName(const std::string& name) {
  if (name == "tensor") return DeviceAllocation::PerTensor;
  if (name == "torch") return DeviceAllocation::TorchSegments;
  throw BenchFailure("allocation '" + name + "': use tensor or torch");
}

DeviceTensors::DeviceTensors(const bus::Manifest& manifest, DeviceAllocation allocation) {
  int device = 0;
  throwIfCudaFailed(cudaGetDevice(&device), "cudaGetDevice");
  tensors_.reserve(manifest.size());
  OpenSegment small;
  OpenSegment large;
  for (std::size_t index = 0; index < manifest.size(); ++index) {
    const std::uint64_t bytes = manifest.tensorBytes(index);
    const std::string what = "tensor " + std::to_string(index) + " (" + manifest.tensors()[index].name + ")";
    if (bytes == 0) {
      tensors_.emplace_back();
      continue;
    }
    if (allocation == DeviceAllocation::PerTensor) {
      blocks_.push_back(allocateDevice(device, bytes, what));
      tensors_.emplace_back(blocks_.back().data(), bytes);
      continue;
    }
    const std::uint64_t rounded = roundUp(bytes, kTorchMinBlock);
    if (rounded >= kTorchMinLargeAlloc) {
      blocks_.push_back(allocateDevice(device, roundUp(rounded, kTorchRoundLarge), what));
      tensors_.emplace_back(blocks_.back().data(), bytes);
      continue;
    }
    OpenSegment& pool = rounded <= kTorchSmallSize ? small : large;
    if (pool.base == nullptr || pool.capacity - pool.used < rounded) {
      const std::uint64_t segment = rounded <= kTorchSmallSize ? kTorchSmallSegment : kTorchLargeSegment;
      blocks_.push_back(allocateDevice(device, segment, what));
      pool = OpenSegment{blocks_.back().data(), 0, segment};
    }
    tensors_.emplace_back(pool.base + pool.used, bytes);
    pool.used += rounded;
  }
  constTensors_.assign(tensors_.begin(), tensors_.end());
}

std::uint64_t DeviceTensors::allocatedBytes() const {
  std::uint64_t total = 0;
  for (const bus::DeviceBlock& block : blocks_) total += block.size();
  return total;
}

void DeviceTensors::enqueueFill(std::uint64_t seed, std::uint64_t version, cudaStream_t stream) const {
  for (std::size_t index = 0; index < tensors_.size(); ++index) {
    const auto tensor = static_cast<std::uint32_t>(index);
    throwIfCudaFailed(launchContentFill(tensors_[index].data(), tensors_[index].size(),
                                        device_content::tensorKey(seed, tensor, version), stream),
                      "filling tensor " + std::to_string(index));
  }
}

}  // namespace wsync::bench
