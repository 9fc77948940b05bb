#pragma once
// The digest the GPU channels (nccl, cuda_ipc) compute on the device, with its host reference (docs/gpu-channels.md).
//
// XXH3 is a sequential stream: a GPU would have to hash a version in one thread, or read it back to the host. This
// checksum is a sum of per-word terms instead, so thousands of threads can fold any piece of any tensor in any order
// and the partial sums add up to the same value. It is a corruption check (a lost, stale, misplaced or flipped
// word), not a cryptographic hash: like XXH3 on the host channels, it does not resist a forger, who would have to be
// able to write the bus's memory anyway.
//
// Definition. Tensor t's bytes are read as little-endian 64-bit words, the last one zero-padded; the word at index w
// (within its tensor) has value halves lo (low) and hi (high). For lane L in {0, 1}, with 32-bit wrapping
// arithmetic for the keys and the halves:
//     ka = (lo32(w) * kMulW[L]) ^ (hi32(w) * kMulH[L]) ^ (t * kMulT[L]) ^ kSeed[L]
//     kb = rotl32(ka, 16) ^ kSeedB[L]
//     sum[L] += uint64(lo + ka) * uint64(hi + kb)           (mod 2^64)
// A word that changes changes (lo + ka) or (hi + kb) by a non-zero amount below 2^32, which changes the 64-bit
// product unless the other factor is 0: a single corrupted word escapes one lane with probability 2^-32, both lanes
// (independent keys) with about 2^-64. The key depends on the tensor and the word's position, so moved or swapped
// words are caught too. The digest is finishDeviceChecksum(sum, total bytes).
#include <cstddef>
#include <cstdint>
#include <span>

#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::bus {

namespace device_checksum {
inline constexpr std::uint32_t kMulW[2] = {0x9E3779B1U, 0x85EBCA77U};
inline constexpr std::uint32_t kMulH[2] = {0xC2B2AE3DU, 0x27D4EB2FU};
inline constexpr std::uint32_t kMulT[2] = {0x165667B1U, 0xD3A2646CU};
inline constexpr std::uint32_t kSeed[2] = {0x61C88647U, 0x7F4A7C15U};
inline constexpr std::uint32_t kSeedB[2] = {0xA24BAED4U, 0x9FB21C65U};
}  // namespace device_checksum

// The two lane sums, as the device accumulates them (plain data: copied from device memory as is).
struct DeviceChecksumSums {
  std::uint64_t lane[2] = {0, 0};
};
static_assert(sizeof(DeviceChecksumSums) == 16);

// The lane terms of one word: what the device kernel adds for word `word` (index within its tensor) of `tensor`.
inline void addDeviceChecksumWord(DeviceChecksumSums& sums, std::uint32_t tensor, std::uint64_t word,
                                  std::uint64_t value) {
  const auto lo = static_cast<std::uint32_t>(value);
  const auto hi = static_cast<std::uint32_t>(value >> 32);
  const auto wordLo = static_cast<std::uint32_t>(word);
  const auto wordHi = static_cast<std::uint32_t>(word >> 32);
  for (int lane = 0; lane < 2; ++lane) {
    const std::uint32_t ka = (wordLo * device_checksum::kMulW[lane]) ^ (wordHi * device_checksum::kMulH[lane]) ^
                             (tensor * device_checksum::kMulT[lane]) ^ device_checksum::kSeed[lane];
    const std::uint32_t kb = ((ka << 16) | (ka >> 16)) ^ device_checksum::kSeedB[lane];
    sums.lane[lane] += std::uint64_t{static_cast<std::uint32_t>(lo + ka)} * static_cast<std::uint32_t>(hi + kb);
  }
}

// The digest of finished sums over `totalBytes`: each lane through a 64-bit finaliser, so similar sums give
// unrelated digests.
Digest finishDeviceChecksum(const DeviceChecksumSums& sums, std::uint64_t totalBytes);

// Host reference: the device checksum of `tensors` (indexed like the manifest) as the GPU channels compute it.
// Tests compare device results with it; it is far slower than the device.
Digest deviceChecksumOfHost(std::span<const std::span<const std::byte>> tensors);

}  // namespace wsync::bus
