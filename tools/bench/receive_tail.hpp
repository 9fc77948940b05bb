#pragma once
// The data a round's overhead cannot shed: when the trainer's send returns, each receiver still has the last
// buckets of the ring to copy out and digest (at most one per buffer, since the sender refills a buffer only once
// every receiver has drained it). Measured here, in this process, as one receiver would do it: a memcpy and an
// XXH3-128 update per piece of those buckets. A reference for the reader, not subtracted from anything.
#include <cstdint>
#include <span>

#include <wsync/bus/channel/bucket_plan.hpp>

namespace wsync::bench {

struct ReceiveTail {
  std::uint64_t bytes = 0;  // in the last min(buffers, buckets) buckets
  double medianUs = 0;      // one receiver's copy and digest of them, warm caches
};

// `source` is indexed like the plan's manifest; `scratch` likewise, with the same sizes.
ReceiveTail measureReceiveTail(const bus::BucketPlan& plan, std::uint32_t buffers,
                               std::span<const std::span<const std::byte>> source,
                               std::span<const std::span<std::byte>> scratch);

}  // namespace wsync::bench
