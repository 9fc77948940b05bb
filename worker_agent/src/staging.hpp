#pragma once
// Where a worker receives a version before it is committed: one buffer per tensor in manifest order, carved from
// one block that is kept for every later round. It costs one copy of the model, the price of never serving a
// half-received version: the bound buffers change only at commit, by a copy made while the engine is paused.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::worker_agent::detail {

class Staging {
 public:
  // Lays out a buffer per tensor of `manifest`, reusing the block when it is large enough.
  void prepare(const bus::Manifest& manifest);
  // The same for a worker that binds slices: a buffer per bound tensor (`sizes`, in bind order), laid out once.
  void prepareLocals(std::span<const std::uint64_t> sizes);
  std::span<const std::span<std::byte>> tensors() const { return tensors_; }
  std::uint64_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<std::byte[]> block_;
  std::uint64_t capacity_ = 0;
  std::vector<std::span<std::byte>> tensors_;
  bus::Digest laidOut_{};  // the manifest tensors_ is laid out for: the same one again costs nothing
  bool hasLayout_ = false;
  bool localsLaidOut_ = false;  // tensors_ holds the bound tensors (prepareLocals), which never change

  void layOut(std::span<const std::uint64_t> sizes);
};

}  // namespace wsync::worker_agent::detail
