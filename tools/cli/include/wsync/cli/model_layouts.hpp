#pragma once
// The layouts the programs shard and slice a model by (docs/regions.md): what wsync-trainer --shard holds and
// wsync-worker --slice binds. Simple on purpose, and the two the field's frameworks use most: FSDP2's dim-0 shards
// on the trainer side, a tensor-parallel column slice on the engine side, so that a round moves every byte from a
// rank that is not the one that needs it.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/region.hpp"

namespace wsync::cli {

// Part `rank` of `count`.
struct Part {
  std::uint32_t rank = 0;
  std::uint32_t count = 1;
};

// "R/N" (0 <= R < N <= bus::kMaxSources), or why not.
tl::expected<Part, std::string> parsePart(std::string_view text);

// The half-open range [begin, end) of `extent` that part `part` takes: an even split, the first parts one longer.
std::pair<std::int64_t, std::int64_t> partRange(std::int64_t extent, Part part);

// Rows partRange(dim 0) of every tensor, as FSDP2 shards parameters; a tensor of rank 0 whole on every rank (a
// replica). A part with no rows of a tensor holds nothing of it.
bus::SourceHoldings rowShards(std::span<const bus::TensorSpec> tensors, Part part);
// Where each held region's bytes are inside the whole tensors `buffers` (indexed like `tensors`): rows of dim 0 are
// contiguous, so a shard is a subspan.
std::vector<std::span<const std::byte>> shardViews(const bus::SourceHoldings& holdings,
                                                   std::span<const bus::TensorSpec> tensors,
                                                   std::span<const std::span<const std::byte>> buffers);

// One tensor of a worker that takes a tensor-parallel slice: its local tensor (the checkpoint's name, the slice's
// shape) and the region of the checkpoint tensor it receives.
struct SlicedTensor {
  bus::TensorSpec local;
  bus::Box region;
  bool sliced = false;  // false: the whole tensor
};
// Columns partRange(last dim) of every tensor of rank >= 1 that has at least `part.count` of them; the rest whole.
std::vector<SlicedTensor> columnSlices(std::span<const bus::TensorSpec> tensors, Part part);

}  // namespace wsync::cli
