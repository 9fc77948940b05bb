#pragma once
#include <cstdint>

#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::bus {

// What one side of a transfer moved: the bytes and the digest of the tensors' bytes in manifest order (independent
// of the bucket layout, so the coordinator can compare the sender's with every receiver's; channel.hpp says which
// digest each channel computes).
struct TransferResult {
  std::uint64_t bytes = 0;
  Digest digest;
};

}  // namespace wsync::bus
