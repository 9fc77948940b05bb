#pragma once
// A region source's stream on the shm channel (docs/shm-channel.md, "Region transfers"): the source's segments in
// its send order (RegionPlan::segmentsOf), packed into its ring's buckets the way BucketPlan packs a manifest's
// tensors ("tensor" i of the bucket plan is the source's i-th segment), and for each bucket the receivers that take
// a delivery in it. A pure function of the plan, the source and the ring's bucket size: the source and every
// receiver compute the same stream without a word between them. It refers to the plan, which must outlive it.
#include <cstdint>
#include <span>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"

namespace wsync::bus {

// Where each segment starts in a bucket: a cache line, so that no two segments share one and the receivers'
// streaming stores of one segment never wait on another's bytes.
inline constexpr std::uint32_t kRegionStreamAlignment = 64;

class RegionStream {
 public:
  // PlanMismatch when the plan has more receivers than a ReceiverSet holds, or the source is not the plan's.
  static tl::expected<RegionStream, ChannelFailure> build(const RegionPlan& plan, std::uint32_t source,
                                                          std::uint64_t bucketBytes);

  const BucketPlan& buckets() const { return buckets_; }
  std::uint32_t bucketCount() const { return buckets_.bucketCount(); }
  // The receivers that take a delivery in `bucket`: the only ones that drain it.
  ReceiverSet receiversOf(std::uint32_t bucket) const { return receivers_[bucket]; }
  // The position in the source's send order of plan segment `segment` (an index into RegionPlan::segments()), or
  // segmentCount() when the source does not send it.
  std::uint32_t positionOf(std::uint32_t segment) const;
  std::uint32_t segmentCount() const { return static_cast<std::uint32_t>(order_.size()); }

 private:
  RegionStream(BucketPlan buckets, std::vector<ReceiverSet> receivers, std::span<const std::uint32_t> order)
      : buckets_(std::move(buckets)), receivers_(std::move(receivers)), order_(order) {}

  BucketPlan buckets_;
  std::vector<ReceiverSet> receivers_;    // [bucket]
  std::span<const std::uint32_t> order_;  // RegionPlan::segmentsOf(source): increasing segment indices
};

}  // namespace wsync::bus
