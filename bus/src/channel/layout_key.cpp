#include "wsync/bus/channel/layout_key.hpp"

#include <type_traits>

#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {

// The digest reads the spans' own bytes: that is their (pointer, size) pair and nothing else.
static_assert(sizeof(std::span<const std::byte>) == 2 * sizeof(void*) &&
              std::has_unique_object_representations_v<std::span<const std::byte>> &&
              sizeof(std::span<std::byte>) == sizeof(std::span<const std::byte>));

Digest LayoutKey::of(std::span<const std::span<const std::byte>> tensors, std::uint64_t token) {
  if (token != 0 && token == token_) return digest_;
  return read(tensors.data(), tensors.size_bytes(), token);
}

Digest LayoutKey::of(std::span<const std::span<std::byte>> tensors, std::uint64_t token) {
  if (token != 0 && token == token_) return digest_;
  return read(tensors.data(), tensors.size_bytes(), token);
}

Digest LayoutKey::read(const void* array, std::size_t bytes, std::uint64_t token) {
  StreamDigest digest;
  digest.add(array, bytes);
  digest_ = digest.digest();
  token_ = token;
  ++reads_;
  return digest_;
}

}  // namespace wsync::bus
