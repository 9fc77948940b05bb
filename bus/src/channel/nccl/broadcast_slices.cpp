#include "wsync/bus/channel/nccl/broadcast_slices.hpp"

#include <algorithm>
#include <limits>

namespace wsync::bus {

std::vector<BroadcastSlice> broadcastSlices(const BucketPlan& plan, std::uint64_t firstSliceBytes,
                                            std::uint64_t maxSliceBytes) {
  const std::uint64_t largest =
      maxSliceBytes == 0 ? std::numeric_limits<std::uint64_t>::max()
                         : std::max(kSliceAlignment, maxSliceBytes / kSliceAlignment * kSliceAlignment);
  firstSliceBytes = std::min(firstSliceBytes, largest);
  std::uint64_t total = 0;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) total += plan.bucketUsedBytes(bucket);

  std::vector<BroadcastSlice> slices;
  std::uint64_t before = 0;  // the transfer's bytes in earlier slices
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    const std::uint64_t used = plan.bucketUsedBytes(bucket);
    std::uint64_t offset = 0;
    while (offset < used) {
      const std::uint64_t left = used - offset;
      // Without a ramp: the bucket in even slices within the largest (no sliver at its end).
      const std::uint64_t cuts = left / largest + (left % largest != 0 ? 1 : 0);
      std::uint64_t bytes = std::min(left, ((left + cuts - 1) / cuts + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment);
      if (firstSliceBytes != 0) {
        // No larger than what came before, nor than what comes after (bytes <= total - before - bytes).
        const std::uint64_t limit = std::min({std::max(firstSliceBytes, before),
                                              std::max(firstSliceBytes, (total - before) / 2), largest});
        bytes = std::max(kSliceAlignment, limit / kSliceAlignment * kSliceAlignment);
        // The rest of the bucket whole rather than a sliver of it as a broadcast of its own; where the whole would
        // outgrow the largest slice, in two halves (each within it, as the rest is under largest + firstSliceBytes).
        if (bytes >= left || left - bytes < firstSliceBytes) {
          bytes = left <= largest ? left : (left / 2 + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment;
        }
      }
      slices.push_back(BroadcastSlice{.bucket = bucket, .offset = offset, .bytes = bytes});
      offset += bytes;
      before += bytes;
    }
  }
  return slices;
}

}  // namespace wsync::bus
