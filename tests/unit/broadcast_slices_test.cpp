// How the nccl channel cuts a transfer into broadcasts: every bucket's used bytes exactly once, in order, at aligned
// offsets; whole buckets in the middle, a ramp from the first slice's size up at the start and down to it at the
// end; few broadcasts more than buckets; the same answer for the same plan (every rank computes its own).
#include <gtest/gtest.h>

#include <bit>
#include <string>

#include "wsync/bus/channel/nccl/broadcast_slices.hpp"
#include "wsync/cli/model_catalog.hpp"

namespace wsync::bus {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr std::uint64_t kGiB = 1024 * kMiB;

BucketPlan planOf(const std::string& model, std::uint64_t bucketBytes) {
  auto manifest = Manifest::create(*cli::modelTensors(model));
  return *BucketPlan::build(*manifest, bucketBytes, 256);
}

BucketPlan planOfSizes(const std::vector<std::uint64_t>& byteSizes, std::uint64_t bucketBytes) {
  std::vector<TensorSpec> tensors;
  for (std::size_t i = 0; i < byteSizes.size(); ++i) {
    tensors.push_back({"t" + std::to_string(i), msg::DType::U8, {static_cast<std::int64_t>(byteSizes[i])}});
  }
  return *BucketPlan::build(*Manifest::create(std::move(tensors)), bucketBytes, 256);
}

// The invariants of any cut: a tiling of every bucket's used bytes, bucket by bucket, at aligned offsets; with a
// first slice, no slice larger than what comes before or after it (but for a bucket's merged tail, which may add
// up to `first` to a slice and take as much from what follows), and whole buckets wherever both sides hold a bucket
// or more.
// `largest` (0: none) caps every slice, and a middle bucket is then whole only where it fits in one.
void expectTiles(const BucketPlan& plan, const std::vector<BroadcastSlice>& slices, std::uint64_t first,
                 std::uint64_t largest = 0) {
  std::uint64_t total = 0;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) total += plan.bucketUsedBytes(bucket);
  std::size_t index = 0;
  std::uint64_t before = 0;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    std::uint64_t offset = 0;
    while (offset < plan.bucketUsedBytes(bucket)) {
      ASSERT_LT(index, slices.size()) << "bucket " << bucket << " is not covered past " << offset;
      const BroadcastSlice& slice = slices[index];
      ASSERT_EQ(slice.bucket, bucket) << "slice " << index;
      ASSERT_EQ(slice.offset, offset) << "slice " << index;
      ASSERT_EQ(slice.offset % kSliceAlignment, 0U) << "slice " << index;
      ASSERT_GT(slice.bytes, 0U) << "slice " << index;
      if (largest != 0) {
        EXPECT_LE(slice.bytes, largest) << "slice " << index << " outgrows the staging buffers";
      }
      const bool wholeFits = largest == 0 || plan.bucketUsedBytes(bucket) <= largest;
      if (first != 0) {
        const std::uint64_t after = total - before - slice.bytes;
        EXPECT_LT(slice.bytes, std::max(first, before) + first) << "slice " << index << " outgrows what came before";
        EXPECT_LT(slice.bytes, std::max(first, after) + 2 * first) << "slice " << index << " outgrows what follows";
        if (wholeFits && before >= plan.bucketBytes() && after >= plan.bucketBytes() && offset == 0) {
          EXPECT_EQ(slice.bytes, plan.bucketUsedBytes(bucket)) << "a middle bucket cut, slice " << index;
        }
      } else if (wholeFits) {
        EXPECT_EQ(slice.bytes, plan.bucketUsedBytes(bucket));
      } else {
        const std::uint64_t used = plan.bucketUsedBytes(bucket);
        EXPECT_LE(slice.bytes, largest) << "slice " << index;
        EXPECT_GE(slice.bytes + kSliceAlignment, used / ((used + largest - 1) / largest)) << "slice " << index;
      }
      offset += slice.bytes;
      before += slice.bytes;
      ++index;
    }
    ASSERT_EQ(offset, plan.bucketUsedBytes(bucket)) << "bucket " << bucket << " overrun";
  }
  EXPECT_EQ(index, slices.size());
}

TEST(BroadcastSlices, WithoutAFirstSliceEveryBucketIsOneBroadcast) {
  const BucketPlan plan = planOf("opt-125m", 16 * kMiB);
  const auto slices = broadcastSlices(plan, 0);
  ASSERT_EQ(slices.size(), plan.bucketCount());
  expectTiles(plan, slices, 0);
}

// Four full buckets of 1 GiB: up from 64 MiB by doubling, two whole buckets, down again.
TEST(BroadcastSlices, RampUpAndDownAroundWholeBuckets) {
  const BucketPlan plan = planOfSizes({kGiB, kGiB, kGiB, kGiB}, kGiB);
  const auto slices = broadcastSlices(plan, 64 * kMiB);
  std::vector<std::uint64_t> sizes;
  for (const BroadcastSlice& slice : slices) sizes.push_back(slice.bytes / kMiB);
  EXPECT_EQ(sizes, (std::vector<std::uint64_t>{64, 64, 128, 256, 512, 1024, 1024, 512, 256, 128, 64, 64}));
  expectTiles(plan, slices, 64 * kMiB);
}

// The plan's many-tensor and frontier-MoE shapes at every bucket size the benchmarks sweep: a first and a last
// broadcast of the first slice's size, and at most a few ramp steps more than buckets.
TEST(BroadcastSlices, CatalogModelsAtEveryBucketSize) {
  constexpr std::uint64_t kFirst = 64 * kMiB;
  for (const char* model : {"synthetic:100000:4096", "deepseek-v3:5", "qwen2.5-7b", "opt-125m", "tiny"}) {
    for (const std::uint64_t bucket : {256 * kMiB, kGiB, 4 * kGiB}) {
      SCOPED_TRACE(std::string(model) + ", bucket " + std::to_string(bucket / kMiB) + " MiB");
      const BucketPlan plan = planOf(model, bucket);
      const auto slices = broadcastSlices(plan, kFirst);
      expectTiles(plan, slices, kFirst);
      ASSERT_FALSE(slices.empty());
      EXPECT_LE(slices.front().bytes, kFirst);
      EXPECT_LT(slices.back().bytes, 2 * kFirst);
      const auto rampSteps = static_cast<std::size_t>(std::bit_width(bucket / kFirst));
      EXPECT_LE(slices.size(), plan.bucketCount() + 2 * rampSteps + 2);
      EXPECT_EQ(slices, broadcastSlices(plan, kFirst));
    }
  }
}

// Staging buffers of half a bucket (the channel's default): the same ramp, capped at 512 MiB, so every middle bucket
// is two broadcasts.
TEST(BroadcastSlices, HalfBucketSlicesCapTheRamp) {
  const BucketPlan plan = planOfSizes({kGiB, kGiB, kGiB, kGiB}, kGiB);
  const auto slices = broadcastSlices(plan, 64 * kMiB, 512 * kMiB);
  std::vector<std::uint64_t> sizes;
  for (const BroadcastSlice& slice : slices) sizes.push_back(slice.bytes / kMiB);
  EXPECT_EQ(sizes, (std::vector<std::uint64_t>{64, 64, 128, 256, 512, 512, 512, 512, 512, 512, 256, 128, 64, 64}));
  expectTiles(plan, slices, 64 * kMiB, 512 * kMiB);
}

// Without a ramp, a cap cuts each bucket larger than it into even slices (no sliver at its end).
TEST(BroadcastSlices, CapWithoutARampCutsBucketsEvenly) {
  const BucketPlan plan = planOfSizes({kGiB, 800 * kMiB}, kGiB);
  const auto slices = broadcastSlices(plan, 0, 512 * kMiB);
  std::vector<std::uint64_t> sizes;
  for (const BroadcastSlice& slice : slices) sizes.push_back(slice.bytes / kMiB);
  EXPECT_EQ(sizes, (std::vector<std::uint64_t>{512, 512, 400, 400}));
  expectTiles(plan, slices, 0, 512 * kMiB);
}

// Every catalog shape at every bucket size, capped at half a bucket: no slice larger, a bucket's tail never cut
// into a sliver (it is merged or halved), and about two broadcasts per bucket plus the ramps.
TEST(BroadcastSlices, CatalogModelsCappedAtHalfABucket) {
  constexpr std::uint64_t kFirst = 64 * kMiB;
  for (const char* model : {"synthetic:100000:4096", "deepseek-v3:5", "qwen2.5-7b", "opt-125m", "tiny"}) {
    for (const std::uint64_t bucket : {256 * kMiB, kGiB, 4 * kGiB}) {
      SCOPED_TRACE(std::string(model) + ", bucket " + std::to_string(bucket / kMiB) + " MiB");
      const BucketPlan plan = planOf(model, bucket);
      const auto slices = broadcastSlices(plan, kFirst, bucket / 2);
      expectTiles(plan, slices, kFirst, bucket / 2);
      std::uint32_t bucketOf = 0;
      std::uint64_t offset = 0;
      for (const BroadcastSlice& slice : slices) {
        if (slice.bucket != bucketOf) offset = 0;
        bucketOf = slice.bucket;
        offset += slice.bytes;
        const std::uint64_t rest = plan.bucketUsedBytes(slice.bucket) - offset;
        if (rest != 0) {
          EXPECT_GE(rest, std::min(kFirst, bucket / 2) / 2) << "a sliver left in bucket " << slice.bucket;
        }
      }
      const auto rampSteps = static_cast<std::size_t>(std::bit_width(bucket / kFirst));
      EXPECT_LE(slices.size(), 2 * plan.bucketCount() + 2 * rampSteps + 2);
      EXPECT_EQ(slices, broadcastSlices(plan, kFirst, bucket / 2));
    }
  }
}

// Buckets smaller than the first slice, odd used sizes: the tiling holds and no bucket is cut.
TEST(BroadcastSlices, SmallBucketsAreNeverCut) {
  const BucketPlan plan = planOfSizes({100'000, 3, 70'000, 1'000'000, 5}, 64 * 1024);
  const auto slices = broadcastSlices(plan, 1 * kMiB);
  ASSERT_EQ(slices.size(), plan.bucketCount());
  expectTiles(plan, slices, 1 * kMiB);
}

}  // namespace
}  // namespace wsync::bus
