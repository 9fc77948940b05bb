// DeviceBlock in a build without CUDA: nothing to allocate.
#include "wsync/bus/channel/device_block.hpp"

#include <utility>

namespace wsync::bus {

namespace {
const std::string kNoCuda = "this build of wsync has no CUDA support (built without the CUDA Toolkit)";
}  // namespace

tl::expected<DeviceBlock, std::string> DeviceBlock::allocate(int /*device*/, std::uint64_t /*bytes*/) {
  return tl::unexpected(kNoCuda);
}
DeviceBlock::DeviceBlock(DeviceBlock&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), device_(other.device_) {}
DeviceBlock& DeviceBlock::operator=(DeviceBlock&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  device_ = other.device_;
  return *this;
}
DeviceBlock::~DeviceBlock() = default;
void DeviceBlock::release() noexcept {}
tl::expected<void, std::string> DeviceBlock::upload(std::uint64_t, std::span<const std::byte>) {
  return tl::unexpected(kNoCuda);
}
tl::expected<void, std::string> DeviceBlock::download(std::uint64_t, std::span<std::byte>) const {
  return tl::unexpected(kNoCuda);
}

}  // namespace wsync::bus
