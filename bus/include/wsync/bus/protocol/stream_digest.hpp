#pragma once
// XXH3-128 over a stream of bytes fed in pieces: the payload digest of the host channel (every byte of the tensors
// in manifest order, whatever the bucket layout) and of a worker's staging, and the manifest digest.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "wsync/bus/protocol/manifest.hpp"

struct XXH3_state_s;

namespace wsync::bus {

class StreamDigest {
 public:
  StreamDigest();
  ~StreamDigest();
  StreamDigest(const StreamDigest&) = delete;
  StreamDigest& operator=(const StreamDigest&) = delete;

  void add(const void* data, std::uint64_t bytes);
  // The bytes added so far.
  std::uint64_t bytes() const { return total_; }
  Digest digest() const;

 private:
  XXH3_state_s* state_;
  std::uint64_t total_ = 0;
};

}  // namespace wsync::bus
