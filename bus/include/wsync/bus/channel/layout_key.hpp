#pragma once
// What a channel's cached layout (cuda_ipc's export and copy table, nccl's routes) was built for: one digest of the
// caller's span array, each span's (address, size). Reading the array costs a pass over it every round (100,000
// tensors: 1.6 MB, on the round's critical path), unless the caller names the array: a
// layout token (Channel::setLayoutToken) equal to the one of the last array digested vouches that this array holds
// the same pairs, element for element, and the digest is reused without reading it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::bus {

class LayoutKey {
 public:
  // The key of `tensors`. `token`: 0 vouches nothing (the array is read); another value names the array's contents,
  // so that the same token with different contents is the caller's error (the channel then copies by a stale
  // layout).
  Digest of(std::span<const std::span<const std::byte>> tensors, std::uint64_t token);
  Digest of(std::span<const std::span<std::byte>> tensors, std::uint64_t token);
  // How many calls read their array (tests and benchmarks: whether the token was honoured).
  std::uint64_t reads() const { return reads_; }

 private:
  Digest read(const void* array, std::size_t bytes, std::uint64_t token);

  std::uint64_t token_ = 0;  // of the last array read; 0 when none was named
  Digest digest_{};
  std::uint64_t reads_ = 0;
};

}  // namespace wsync::bus
