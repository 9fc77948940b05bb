#pragma once
// How an nccl transfer cuts its buckets into broadcasts (docs/gpu-channels.md, "Slices"). A pure function of the
// bucket plan and two numbers, so that every rank issues the same broadcasts of the same sizes in the same order.
#include <cstdint>
#include <vector>

#include "wsync/bus/channel/bucket_plan.hpp"

namespace wsync::bus {

// One ncclBroadcast: `bytes` from `offset` of bucket `bucket`.
struct BroadcastSlice {
  std::uint32_t bucket = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;

  friend bool operator==(const BroadcastSlice&, const BroadcastSlice&) = default;
};

// Slices start at a multiple of this from their bucket's start: 16-byte vector copies stay aligned, and a piece's
// part in a slice keeps starting at a multiple of 8 in its tensor (the checksum's words).
inline constexpr std::uint64_t kSliceAlignment = 4096;

// Every bucket's used bytes, bucket by bucket, as broadcasts. `firstSliceBytes` 0: one broadcast per bucket.
// Otherwise (a multiple of kSliceAlignment) the transfer ramps up and down around whole buckets: a slice is no
// larger than everything before it nor than everything after it (and never under firstSliceBytes, but for the tail
// of a bucket shorter than that). So the work nothing overlaps, the sender's pack of the first slice and a
// receiver's unpack of the last, covers firstSliceBytes rather than a bucket, while a transfer of B buckets takes
// about B + 2 log2(bucket / firstSliceBytes) broadcasts, each of which costs NCCL a fixed few tens of microseconds.
//
// `maxSliceBytes` (0: no limit; else rounded down to a multiple of kSliceAlignment) caps every slice: the staging
// buffers a packed slice passes through are that large, not a bucket (nccl_channel.hpp, "Memory"). A bucket larger
// than it is cut into slices of it, its tail merged or halved as above so that no slice exceeds it.
std::vector<BroadcastSlice> broadcastSlices(const BucketPlan& plan, std::uint64_t firstSliceBytes,
                                            std::uint64_t maxSliceBytes = 0);

}  // namespace wsync::bus
