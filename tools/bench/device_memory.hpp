#pragma once
// Device memory of a `wsync-bench gpu` rank: a model's tensors, allocated as a trainer's or an engine's would be, and
// plain buffers for the raw baselines, all bus::DeviceBlocks (zeroed when allocated, freed when destroyed).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <wsync/bus/channel/device_block.hpp>
#include <wsync/bus/protocol/manifest.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {

// cudaMalloc found too little memory: the measurement is skipped rather than the run failed.
class DeviceMemoryShort : public BenchFailure {
 public:
  explicit DeviceMemoryShort(const std::string& what) : BenchFailure(what) {}
};

// Throws BenchFailure naming `what` and CUDA's error when `error` is not cudaSuccess.
void throwIfCudaFailed(cudaError_t error, const std::string& what);

// `bytes` on `device`, which stays the current device. Throws DeviceMemoryShort when the device is full, BenchFailure
// on other errors.
bus::DeviceBlock allocateDevice(int device, std::uint64_t bytes, const std::string& what);

// How a model's tensors are laid out in device memory.
//  - PerTensor: one cudaMalloc per tensor (what a loader that allocates tensor by tensor without a caching allocator
//    does; the cuda_ipc sender then exports one handle per tensor).
//  - TorchSegments: PyTorch's caching allocator as it serves a model loaded tensor by tensor: sizes rounded up to 512
//    bytes; up to 1 MiB carved from 2 MiB segments, up to 10 MiB from 20 MiB segments, larger ones in a segment of
//    their own rounded up to 2 MiB (c10/cuda/CUDACachingAllocator.cpp, without expandable segments).
enum class DeviceAllocation : std::uint8_t { PerTensor, TorchSegments };

// "tensor" / "torch"; throws BenchFailure for another name.
DeviceAllocation deviceAllocationFromName(const std::string& name);

class DeviceTensors {
 public:
  // On the current device. Throws DeviceMemoryShort when the device is full, BenchFailure on other errors.
  DeviceTensors(const bus::Manifest& manifest, DeviceAllocation allocation);

  std::span<const std::span<std::byte>> tensors() const { return tensors_; }
  std::span<const std::span<const std::byte>> constTensors() const { return constTensors_; }
  std::size_t allocationCount() const { return blocks_.size(); }
  std::uint64_t allocatedBytes() const;  // the cudaMalloc sizes, padding included

  // Enqueues on `stream` the content of `version` (device_content.hpp) for every tensor.
  void enqueueFill(std::uint64_t seed, std::uint64_t version, cudaStream_t stream) const;

 private:
  std::vector<bus::DeviceBlock> blocks_;
  std::vector<std::span<std::byte>> tensors_;
  std::vector<std::span<const std::byte>> constTensors_;
};

}  // namespace wsync::bench
