#include "channel/shm/digest_copy.hpp"

#include <algorithm>
#include <cstring>

#include "wsync/bus/channel/shm/streaming_copy.hpp"

namespace wsync::bus {
namespace {

// Copies and digests go in slices of this size: small enough to stay in L1/L2 between the copy and the digest.
constexpr std::uint64_t kDigestSlice = 16 * 1024;

}  // namespace

void packAndDigest(std::byte* target, const std::byte* source, std::uint64_t bytes, StreamDigest& digest) {
  for (std::uint64_t offset = 0; offset < bytes; offset += kDigestSlice) {
    const std::uint64_t slice = std::min(kDigestSlice, bytes - offset);
    std::memcpy(target + offset, source + offset, slice);
    digest.add(source + offset, slice);
  }
}

void unpackAndDigest(std::byte* target, const std::byte* source, std::uint64_t bytes, StreamDigest& digest) {
  for (std::uint64_t offset = 0; offset < bytes; offset += kDigestSlice) {
    const std::uint64_t slice = std::min(kDigestSlice, bytes - offset);
    streamingCopy(target + offset, source + offset, slice);
    digest.add(source + offset, slice);
  }
}

}  // namespace wsync::bus
