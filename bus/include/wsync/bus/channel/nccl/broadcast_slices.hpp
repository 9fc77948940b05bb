#pragma once
// How an nccl transfer cuts its buckets into broadcasts (docs/gpu-channels.md, "Slices"). A pure function of the
// bucket plan and two numbers, so that every rank issues the same broadcasts of the same sizes in the same order.
#include <cstdint>
#include <vector>

#include "wsync/bus/channel/bucket_plan.hpp"

namespace wsync::bus {

// One ncclBroadcast of `bytes`, starting `offset` bytes into bucket `bucket`.
//
// A direct slice lies in one bucket that holds a single piece filling it (the middle of a tensor larger than a
// bucket): it is broadcast between the tensors. Every other slice is staged, and may run on across the packed
// buckets that follow its first one: in a staging buffer each bucket's bytes start at a multiple of
// kSliceAlignment from the previous bucket's start, and `bytes` counts the padding between them.
struct BroadcastSlice {
  std::uint32_t bucket = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  bool direct = false;

  friend bool operator==(const BroadcastSlice&, const BroadcastSlice&) = default;
};

// Slices start at a multiple of this from their bucket's start, and packed buckets at a multiple of it from each
// other in a staging buffer: 16-byte vector copies stay aligned, and a piece's part in a slice keeps starting at a
// multiple of 8 in its tensor (the checksum's words).
inline constexpr std::uint64_t kSliceAlignment = 4096;

// True when `bucket` is one piece that fills it.
bool bucketIsDirect(const BucketPlan& plan, std::uint32_t bucket);

// The transfer as broadcasts. Consecutive packed buckets are one stream of bytes, a direct bucket one of its own;
// slices follow the streams in order and never span two.
//
// `maxSliceBytes` (0: the plan's bucket size; else rounded down to a multiple of kSliceAlignment) caps every slice:
// the staging buffers a packed slice passes through are that large (nccl_channel.hpp, "Memory").
//
// `firstSliceBytes` 0: each stream in even slices within the cap. Otherwise (a multiple of kSliceAlignment) the
// transfer ramps up and down: a slice is no larger than everything before it nor than everything after it (and
// never under firstSliceBytes, but for the tail of a stream shorter than that). So the work nothing overlaps, the
// sender's pack of the first slice and a receiver's unpack of the last, covers firstSliceBytes rather than a bucket,
// while a transfer takes about its size over the cap plus 2 log2(cap / firstSliceBytes) broadcasts, each of which
// has NCCL's fixed cost per call. A stream's rest shorter than firstSliceBytes joins the slice before it (halved in two
// where the whole would outgrow the cap), rather than being a broadcast of its own.
std::vector<BroadcastSlice> broadcastSlices(const BucketPlan& plan, std::uint64_t firstSliceBytes,
                                            std::uint64_t maxSliceBytes = 0);

// A piece's part in slice `slice`: `bytes` at `tensorOffset` in tensor `tensor`, `sliceOffset` bytes from the
// slice's start (in its staging buffer, or in the direct broadcast).
struct SlicePart {
  std::uint32_t slice = 0;
  std::uint32_t tensor = 0;
  std::uint64_t tensorOffset = 0;
  std::uint64_t sliceOffset = 0;
  std::uint64_t bytes = 0;

  friend bool operator==(const SlicePart&, const SlicePart&) = default;
};

// Every piece's parts in `slices` (broadcastSlices of `plan`), slice by slice and in order within each.
std::vector<SlicePart> sliceParts(const BucketPlan& plan, const std::vector<BroadcastSlice>& slices);

}  // namespace wsync::bus
