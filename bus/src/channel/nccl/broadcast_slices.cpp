#include "wsync/bus/channel/nccl/broadcast_slices.hpp"

#include <algorithm>

namespace wsync::bus {

std::vector<BroadcastSlice> broadcastSlices(const BucketPlan& plan, std::uint64_t firstSliceBytes) {
  std::uint64_t total = 0;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) total += plan.bucketUsedBytes(bucket);

  std::vector<BroadcastSlice> slices;
  std::uint64_t before = 0;  // the transfer's bytes in earlier slices
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    const std::uint64_t used = plan.bucketUsedBytes(bucket);
    std::uint64_t offset = 0;
    while (offset < used) {
      const std::uint64_t left = used - offset;
      std::uint64_t bytes = left;
      if (firstSliceBytes != 0) {
        // No larger than what came before, nor than what comes after (bytes <= total - before - bytes).
        const std::uint64_t limit = std::min(std::max(firstSliceBytes, before), std::max(firstSliceBytes, (total - before) / 2));
        bytes = std::max(kSliceAlignment, limit / kSliceAlignment * kSliceAlignment);
        // The rest of the bucket whole rather than a sliver of it as a broadcast of its own.
        if (bytes >= left || left - bytes < firstSliceBytes) bytes = left;
      }
      slices.push_back(BroadcastSlice{.bucket = bucket, .offset = offset, .bytes = bytes});
      offset += bytes;
      before += bytes;
    }
  }
  return slices;
}

}  // namespace wsync::bus
