#include "wsync/bus/channel/device_checksum.hpp"

#include <cstring>

namespace wsync::bus {
namespace {

// The 64-bit finaliser of MurmurHash3: every input bit affects every output bit.
std::uint64_t fmix64(std::uint64_t value) {
  value ^= value >> 33;
  value *= 0xff51afd7ed558ccdULL;
  value ^= value >> 33;
  value *= 0xc4ceb9fe1a85ec53ULL;
  value ^= value >> 33;
  return value;
}

}  // namespace

Digest finishDeviceChecksum(const DeviceChecksumSums& sums, std::uint64_t totalBytes) {
  return Digest{.lo = fmix64(sums.lane[0] ^ totalBytes), .hi = fmix64(sums.lane[1] + totalBytes)};
}

Digest deviceChecksumOfHost(std::span<const std::span<const std::byte>> tensors) {
  DeviceChecksumSums sums;
  std::uint64_t total = 0;
  for (std::size_t tensor = 0; tensor < tensors.size(); ++tensor) {
    const auto bytes = tensors[tensor];
    total += bytes.size();
    for (std::uint64_t offset = 0, word = 0; offset < bytes.size(); offset += 8, ++word) {
      std::uint64_t value = 0;  // little-endian, zero-padded: what the device reads on x86 and on NVIDIA GPUs
      std::memcpy(&value, bytes.data() + offset, std::min<std::uint64_t>(8, bytes.size() - offset));
      addDeviceChecksumWord(sums, static_cast<std::uint32_t>(tensor), word, value);
    }
  }
  return finishDeviceChecksum(sums, total);
}

}  // namespace wsync::bus
