#pragma once
// One block of GPU memory with copies to and from the host: what the CLIs and examples that stand in for a
// trainer or an engine need to hold a model on a GPU. In builds without CUDA (src/device_block_host.cpp) every
// call fails, naming why. Part of wsync::channels, like open_channel.hpp.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <tl/expected.hpp>

namespace wsync::bus {

class DeviceBlock {
 public:
  // cudaMalloc of `bytes` on `device`, zeroed.
  static tl::expected<DeviceBlock, std::string> allocate(int device, std::uint64_t bytes);
  DeviceBlock() = default;
  DeviceBlock(DeviceBlock&& other) noexcept;
  DeviceBlock& operator=(DeviceBlock&& other) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  ~DeviceBlock();

  std::byte* data() const { return data_; }  // a device address
  std::uint64_t size() const { return size_; }
  int device() const { return device_; }

  // Synchronous copies between this block (from `offset`) and host memory; when they return, the bytes are there.
  tl::expected<void, std::string> upload(std::uint64_t offset, std::span<const std::byte> host);
  tl::expected<void, std::string> download(std::uint64_t offset, std::span<std::byte> host) const;

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  int device_ = -1;
};

}  // namespace wsync::bus
