#pragma once
// The engine's destination buffers, by tensor name: where a committed version is copied. Collected before
// WorkerAgent::start() and fixed afterwards, so the I/O thread reads them without a lock.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/region.hpp"
#include "wsync/worker_agent/worker_error.hpp"

namespace wsync::worker_agent {

struct TensorBinding {
  bus::TensorSpec spec;
  std::span<std::byte> destination;  // exactly the tensor's byte count; owned by the engine, outlives the agent
};

class WorkerBindings {
 public:
  // Binds `destination` to tensor `name`. Refused (InvalidBinding, the detail naming the tensor) for a name
  // bus::validateTensorName() refuses (with its detail), a name already bound, an unknown dtype, a negative or
  // too-large shape, a span whose size is not dtype size x elements, or a span that overlaps one already bound
  // (the detail naming both tensors): a version is written into every binding, so of two that share bytes one
  // would end up holding the other's while the round reports both applied. Empty spans overlap nothing.
  tl::expected<void, WorkerFailure> bind(std::string name, msg::DType dtype, std::vector<std::int64_t> shape,
                                         std::span<std::byte> destination);

  // A slice (docs/regions.md): region `region` of checkpoint tensor `tensor` goes into the bound tensor `local` at
  // `localOffset`/`localExtent` (the region's extents, leaving out those of 1). A bound tensor with no region bound
  // into it receives the checkpoint tensor of its own name whole. Checked here for what needs no manifest (a known
  // local tensor, ranks and extents that agree, a place inside it); the coordinator checks the rest against each
  // manifest before any engine pauses (bus::checkBindings), and so does the worker.
  tl::expected<void, WorkerFailure> bindRegion(std::string tensor, bus::Box region, std::string_view local,
                                               std::vector<std::int64_t> localOffset,
                                               std::vector<std::int64_t> localExtent);
  // What a worker that bound slices declares in its hello: every bound tensor as a local tensor, in bind order, and
  // every bound region (a whole one for each tensor nothing was bound into). Nothing when no region was bound: the
  // worker receives every tensor whole, by name.
  std::optional<bus::ReceiverBindings> regionBindings() const;
  bool slices() const { return !regions_.empty(); }

  const std::vector<TensorBinding>& tensors() const { return tensors_; }
  std::size_t size() const { return tensors_.size(); }
  std::uint64_t totalBytes() const { return totalBytes_; }
  // Index in tensors() of the tensor bound under `name`.
  std::optional<std::size_t> find(std::string_view name) const;
  // Index in tensors() of a tensor whose bound span shares a byte with `memory`; none for an empty `memory`.
  // O(log n): the bound spans never overlap, so only the neighbours of `memory`'s start can.
  std::optional<std::size_t> overlapping(std::span<const std::byte> memory) const;

 private:
  std::vector<TensorBinding> tensors_;
  std::unordered_map<std::string, std::size_t> byName_;
  std::map<std::uintptr_t, std::size_t> byAddress_;  // each non-empty span's first byte -> its index in tensors_
  std::uint64_t totalBytes_ = 0;
  std::vector<bus::BoundRegion> regions_;
};

// For each tensor of a manifest, the index of its binding in WorkerBindings::tensors().
using BindingMap = std::vector<std::uint32_t>;

// The check a worker makes before it pauses for a round: the manifest and the bindings hold the same tensors,
// each with the same dtype and shape. On a mismatch the ManifestMismatch failure names the first offending tensor
// and both sides, e.g. "tensor 'fc1.weight': manifest shape [3072, 768], bound [768, 3072]"; a count difference
// names a tensor present on one side only. A pure function, so it can be tested without a bus.
tl::expected<BindingMap, WorkerFailure> matchManifest(const bus::Manifest& manifest, const WorkerBindings& bindings);

// "[3072, 768]", as the mismatch details write shapes.
std::string formatShape(std::span<const std::int64_t> shape);
// "[0x7f2c40001000, 0x7f2c40001040)", as the overlap details write a span's memory.
std::string formatRange(std::span<const std::byte> memory);

}  // namespace wsync::worker_agent
