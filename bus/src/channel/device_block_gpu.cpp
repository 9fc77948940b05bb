// DeviceBlock with the CUDA runtime.
#include <utility>

#include <cuda_runtime_api.h>

#include "wsync/bus/channel/device_block.hpp"

namespace wsync::bus {

namespace {

std::string cudaProblem(const char* call, cudaError_t error) {
  return std::string(call) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
}

tl::expected<void, std::string> checkRange(std::uint64_t offset, std::uint64_t bytes, std::uint64_t size) {
  if (offset > size || bytes > size - offset) {
    return tl::unexpected("bytes " + std::to_string(offset) + ".." + std::to_string(offset + bytes) +
                          " lie outside the device block of " + std::to_string(size));
  }
  return {};
}

}  // namespace

tl::expected<DeviceBlock, std::string> DeviceBlock::allocate(int device, std::uint64_t bytes) {
  if (const cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
    return tl::unexpected("GPU " + std::to_string(device) + ": " + cudaProblem("cudaSetDevice", error));
  }
  DeviceBlock block;
  block.device_ = device;
  block.size_ = bytes;
  if (bytes == 0) return block;
  void* data = nullptr;
  if (const cudaError_t error = cudaMalloc(&data, bytes); error != cudaSuccess) {
    return tl::unexpected(std::to_string(bytes) + " bytes on GPU " + std::to_string(device) + ": " +
                          cudaProblem("cudaMalloc", error));
  }
  block.data_ = static_cast<std::byte*>(data);
  if (const cudaError_t error = cudaMemset(data, 0, bytes); error != cudaSuccess) {
    return tl::unexpected(cudaProblem("cudaMemset", error));
  }
  return block;
}

DeviceBlock::DeviceBlock(DeviceBlock&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), device_(other.device_) {}

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = other.device_;
  }
  return *this;
}

DeviceBlock::~DeviceBlock() { release(); }

void DeviceBlock::release() noexcept {
  if (data_ == nullptr) return;
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(device_);
  cudaFree(data_);
  cudaSetDevice(current);
  data_ = nullptr;
}

tl::expected<void, std::string> DeviceBlock::upload(std::uint64_t offset, std::span<const std::byte> host) {
  if (auto inside = checkRange(offset, host.size(), size_); !inside) return inside;
  if (host.empty()) return {};
  if (const cudaError_t error = cudaMemcpy(data_ + offset, host.data(), host.size(), cudaMemcpyHostToDevice);
      error != cudaSuccess) {
    return tl::unexpected(cudaProblem("cudaMemcpy to the device", error));
  }
  return {};
}

tl::expected<void, std::string> DeviceBlock::download(std::uint64_t offset, std::span<std::byte> host) const {
  if (auto inside = checkRange(offset, host.size(), size_); !inside) return inside;
  if (host.empty()) return {};
  if (const cudaError_t error = cudaMemcpy(host.data(), data_ + offset, host.size(), cudaMemcpyDeviceToHost);
      error != cudaSuccess) {
    return tl::unexpected(cudaProblem("cudaMemcpy to the host", error));
  }
  return {};
}

}  // namespace wsync::bus
