#include "wsync/bus/channel/shm/region_stream.hpp"

#include <algorithm>

namespace wsync::bus {

tl::expected<RegionStream, ChannelFailure> RegionStream::build(const RegionPlan& plan, std::uint32_t source,
                                                               std::uint64_t bucketBytes) {
  if (source >= plan.sourceCount()) {
    return fail(ChannelError::PlanMismatch,
                "source " + std::to_string(source) + " of a plan of " + std::to_string(plan.sourceCount()));
  }
  if (plan.receiverCount() > kMaxArenaReceivers) {
    return fail(ChannelError::PlanMismatch, std::to_string(plan.receiverCount()) + " receivers exceed the arena's " +
                                                std::to_string(kMaxArenaReceivers));
  }
  const std::span<const std::uint32_t> order = plan.segmentsOf(source);
  // positionOf searches the send order: segments are numbered in it.
  if (!std::is_sorted(order.begin(), order.end())) {
    return fail(ChannelError::PlanMismatch, "source " + std::to_string(source) + "'s segments are out of order");
  }
  std::vector<std::uint64_t> sizes(order.size());
  for (std::size_t position = 0; position < order.size(); ++position) {
    sizes[position] = plan.segments()[order[position]].bytes;
  }
  auto buckets = BucketPlan::fromSizes(sizes, bucketBytes, kRegionStreamAlignment);
  if (!buckets) {
    return fail(ChannelError::PlanMismatch,
                "source " + std::to_string(source) + "'s segments: " + buckets.error().describe());
  }
  std::vector<ReceiverSet> receivers(buckets->bucketCount(), 0);
  for (const Piece& piece : buckets->pieces()) {
    for (const SegmentTarget& target : plan.targetsOf(plan.segments()[order[piece.tensor]])) {
      receivers[piece.bucket] |= ReceiverSet{1} << target.receiver;
    }
  }
  return RegionStream(std::move(*buckets), std::move(receivers), order);
}

std::uint32_t RegionStream::positionOf(std::uint32_t segment) const {
  const auto found = std::lower_bound(order_.begin(), order_.end(), segment);
  if (found == order_.end() || *found != segment) return segmentCount();
  return static_cast<std::uint32_t>(found - order_.begin());
}

}  // namespace wsync::bus
