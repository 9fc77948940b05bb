#pragma once
// Regions of tensors (docs/regions.md): a box (an offset and an extent per dimension) of a manifest tensor. A
// trainer rank declares the regions it holds (SourceHoldings), a worker the regions it receives and where each goes
// in its own tensors (ReceiverBindings); every agent computes the same RegionPlan from them
// (channel/region_plan.hpp). A held region lives in one dense row-major buffer of the box's extents (a dim-0 FSDP2
// shard, a Megatron row or column shard, one expert, a whole tensor); a bound region is a box of a local tensor,
// itself dense and row-major.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/core/failure.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/protocol.hpp"

namespace wsync::bus {

// What is wrong with a set of regions; the detail names the tensor, the region and the agent.
enum class RegionError : std::uint8_t {
  UnknownTensor,   // a tensor index or name the manifest does not have
  RankMismatch,    // a box with another number of dimensions than its tensor
  OutsideTensor,   // a box that reaches past its tensor (or its local tensor), or has a negative offset or extent
  Overlap,         // two regions claim the same elements (a source's own, two sources' that differ, a local tensor's)
  Gap,             // elements no source holds, or a local tensor's elements no bound region fills
  ShapeMismatch,   // a bound region whose extents differ from its place in the local tensor
  DTypeMismatch,   // a local tensor of another dtype than the checkpoint tensor bound into it
  InvalidBinding,  // a local tensor that is not one (a bad name, a duplicate, an unknown dtype)
  TooLarge,        // more regions than the protocol's limits allow
  SourceMismatch,  // sources of one version that disagree (their manifests, their count)
};

std::string_view toString(RegionError error);

using RegionFailure = Failure<RegionError>;

// Limits that keep a hostile set of regions from costing unbounded memory or time, and let each declaration travel
// in one message (a table a region or local tensor, within the verifier's budget): a frontier model's 100,000
// tensors held in a region or two each by a rank, or received in a slice or two each by a worker, are inside.
inline constexpr std::size_t kMaxRegionsPerAgent = kMaxTensors;
inline constexpr std::size_t kMaxLocalTensors = kMaxTensors;
static_assert(kMaxTensors + kMaxRegionsPerAgent + 16 <= kMaxVerifierTables,
              "a manifest and a source's holdings must fit one message's verifier budget");
static_assert(kMaxLocalTensors + kMaxRegionsPerAgent + 16 <= kMaxVerifierTables,
              "a worker's bindings must fit one message's verifier budget");
// Sources of one version: the ranks of the largest sharded trainers, with room. The plan's pair tables are sources
// x receivers entries.
inline constexpr std::uint32_t kMaxSources = 4096;

// A box: elements [offset[d], offset[d] + extent[d]) in every dimension d.
struct Box {
  std::vector<std::int64_t> offset;
  std::vector<std::int64_t> extent;

  friend bool operator==(const Box&, const Box&) = default;
};

// The whole of a tensor of `shape`.
Box wholeBox(std::span<const std::int64_t> shape);
std::uint64_t volume(const Box& box);
// Whether `inner` lies within a tensor of `shape` (same rank, offsets and extents non-negative).
bool boxWithin(const Box& inner, std::span<const std::int64_t> shape);
// Whether boxes of these extents hold their elements in the same row-major order: the extents agree once those of 1
// are left out (a region [I, H] of an expert goes into a place [1, I, H] of a stacked tensor).
bool sameElementOrder(std::span<const std::int64_t> a, std::span<const std::int64_t> b);
// The common part of two boxes of one rank; empty (some extent 0) when they do not meet.
Box intersect(const Box& a, const Box& b);
bool meets(const Box& a, const Box& b);
// "[0:50, 0:64]": the box as Python slices, how refusals name a region.
std::string format(const Box& box);
std::string formatShape(std::span<const std::int64_t> shape);

// One region a source holds: tensor `tensor` (manifest index), box `box`, in the source's buffer of the same index.
struct HeldRegion {
  std::uint32_t tensor = 0;
  Box box;

  friend bool operator==(const HeldRegion&, const HeldRegion&) = default;
};

// What one source (a trainer rank) holds of a version, in the order of the buffers it sends from.
struct SourceHoldings {
  std::vector<HeldRegion> regions;

  friend bool operator==(const SourceHoldings&, const SourceHoldings&) = default;
};

// Every tensor of `manifest` whole, in manifest order: what a source that holds the whole model declares.
SourceHoldings wholeHoldings(const Manifest& manifest);

// A tensor of a worker's own, as its engine lays it out (a TP slice, a fused QKV, the experts stacked in one).
struct LocalTensor {
  std::string name;
  msg::DType dtype = msg::DType::Unknown;
  std::vector<std::int64_t> shape;

  friend bool operator==(const LocalTensor&, const LocalTensor&) = default;
};

// Region `region` of checkpoint tensor `tensor` (by name: a worker's bindings do not depend on a manifest's order)
// goes into local tensor `local` at the place `localOffset`/`localExtent`. The region's extents, leaving out those of
// 1, equal the place's (so that an expert [I, H] can go into w13[e, 0:I, :]): the element order is the same on both
// sides.
struct BoundRegion {
  std::string tensor;
  Box region;
  std::uint32_t local = 0;
  std::vector<std::int64_t> localOffset;
  std::vector<std::int64_t> localExtent;

  friend bool operator==(const BoundRegion&, const BoundRegion&) = default;
};

// What one worker receives of a version: its local tensors (the buffers it receives into, in this order) and
// every bound region. Every element of every local tensor is filled by exactly one bound region.
struct ReceiverBindings {
  std::vector<LocalTensor> locals;
  std::vector<BoundRegion> regions;

  friend bool operator==(const ReceiverBindings&, const ReceiverBindings&) = default;
};

// Every tensor of `manifest` whole into a local tensor of its own name and shape, in manifest order: what a worker
// that serves the whole model binds.
ReceiverBindings wholeBindings(const Manifest& manifest);

// Checks one source's holdings against `manifest`: known tensors, boxes of the tensor's rank within it, and no
// two of its own regions overlapping. `source` names it in the detail ("source 2 (trainer-2)").
tl::expected<void, RegionFailure> checkHoldings(const Manifest& manifest, const SourceHoldings& holdings,
                                                const std::string& source);
// Checks that the sources together hold every element of every tensor of `manifest`, each element in one region
// or in equal regions of several sources (replicas): a region that partly overlaps another source's is refused,
// since no sharding produces one and it means the sources disagree on the layout. Each source must have passed
// checkHoldings. `names[s]` names source s.
tl::expected<void, RegionFailure> checkCoverage(const Manifest& manifest, std::span<const SourceHoldings> sources,
                                                std::span<const std::string> names);
// Checks one receiver's bindings against `manifest`: known tensors, regions within them, local tensors that are
// valid and of the bound tensor's dtype, places within the local tensor with the region's extents, and every local
// tensor filled exactly once. Returns the manifest index of each bound region's tensor.
tl::expected<std::vector<std::uint32_t>, RegionFailure> checkBindings(const Manifest& manifest,
                                                                      const ReceiverBindings& bindings,
                                                                      const std::string& receiver);

// XXH3-128 of the holdings or bindings: equal digests mean equal declarations, so that after the first round an
// agent refers to what it declared by digest.
Digest digestOf(const SourceHoldings& holdings);
Digest digestOf(const ReceiverBindings& bindings);

}  // namespace wsync::bus
