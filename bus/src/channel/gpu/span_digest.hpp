#pragma once
// Private to bus/gpu: what a channel's cached layout (copy table, exports) was built for, kept as one digest of the
// caller's span array. A round reads that array once and keeps 16 bytes, where a copy of the (address, size) pairs
// to compare with cost a read of both (100,000 tensors: 1.6 MB each, 0.4 ms on an H100 host).
#include <cstddef>
#include <span>
#include <type_traits>

#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus::gpu::detail {

// The digest reads the spans' own bytes: that is their (pointer, size) pair and nothing else.
static_assert(sizeof(std::span<const std::byte>) == 2 * sizeof(void*) &&
              std::has_unique_object_representations_v<std::span<const std::byte>> &&
              sizeof(std::span<std::byte>) == sizeof(std::span<const std::byte>));

template <typename Byte>
Digest spanDigest(std::span<const std::span<Byte>> tensors) {
  StreamDigest digest;
  digest.add(tensors.data(), tensors.size_bytes());
  return digest.digest();
}

}  // namespace wsync::bus::gpu::detail
