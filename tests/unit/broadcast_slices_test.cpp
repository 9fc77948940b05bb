// How the nccl channel cuts a transfer into broadcasts: consecutive packed buckets as one stream of bytes (each
// bucket padded to kSliceAlignment), a direct bucket as a stream of its own; every stream's bytes exactly once, in
// order, at aligned offsets; a ramp from the first slice's size up at the start and down to it at the end; few
// broadcasts more than the transfer over the cap; the same answer for the same plan (every rank computes its own).
// And every piece's bytes in exactly one slice's parts, where the slice's stream has them.
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

std::uint64_t padded(std::uint64_t bytes) { return (bytes + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment; }

// The streams, written out again: per bucket, its stream's number and where it starts in it; per stream, its length.
struct Streams {
  std::vector<std::size_t> of;
  std::vector<std::uint64_t> start;
  std::vector<std::uint64_t> length;
};

Streams streamsOf(const BucketPlan& plan) {
  Streams streams;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    const bool direct = bucketIsDirect(plan, bucket);
    if (bucket == 0 || direct || bucketIsDirect(plan, bucket - 1)) {
      streams.length.push_back(0);
    } else {
      streams.length.back() = padded(streams.length.back());
    }
    streams.of.push_back(streams.length.size() - 1);
    streams.start.push_back(streams.length.back());
    streams.length.back() += plan.bucketUsedBytes(bucket);
  }
  return streams;
}

std::vector<std::uint64_t> mibOf(const std::vector<BroadcastSlice>& slices) {
  std::vector<std::uint64_t> sizes;
  for (const BroadcastSlice& slice : slices) sizes.push_back(slice.bytes / kMiB);
  return sizes;
}

// The invariants of any cut: a tiling of every stream, stream by stream, at aligned offsets, each slice within
// `largest` (0: the bucket); with a first slice, no slice larger than what comes before or after it (but for a
// stream's merged rest, which may add up to `first` to a slice and take as much from what follows). And the parts:
// every piece's bytes once, each where its slice's stream holds them.
void expectTiles(const BucketPlan& plan, const std::vector<BroadcastSlice>& slices, std::uint64_t first,
                 std::uint64_t largest = 0) {
  const Streams streams = streamsOf(plan);
  const std::uint64_t cap = largest != 0 ? largest : padded(plan.bucketBytes());
  std::uint64_t total = 0;
  for (const std::uint64_t length : streams.length) total += length;
  std::size_t stream = 0;
  std::uint64_t at = 0;  // in the stream
  std::uint64_t before = 0;
  std::vector<std::uint64_t> sliceStarts;
  for (std::size_t index = 0; index < slices.size(); ++index) {
    const BroadcastSlice& slice = slices[index];
    SCOPED_TRACE("slice " + std::to_string(index));
    if (at == streams.length[stream]) {
      ++stream;
      at = 0;
    }
    ASSERT_LT(slice.bucket, plan.bucketCount());
    ASSERT_EQ(streams.of[slice.bucket], stream) << "a stream skipped or left unfinished";
    ASSERT_EQ(streams.start[slice.bucket] + slice.offset, at) << "not where the last slice ended";
    ASSERT_LT(slice.offset, std::max<std::uint64_t>(plan.bucketUsedBytes(slice.bucket), 1)) << "starts past its bucket";
    ASSERT_EQ(slice.offset % kSliceAlignment, 0U);
    ASSERT_EQ(slice.direct, bucketIsDirect(plan, slice.bucket));
    ASSERT_GT(slice.bytes, 0U);
    ASSERT_LE(at + slice.bytes, streams.length[stream]) << "runs past its stream";
    EXPECT_LE(slice.bytes, cap) << "outgrows the staging buffers";
    if (first != 0) {
      const std::uint64_t after = total - before - slice.bytes;
      EXPECT_LT(slice.bytes, std::max(first, before) + first) << "outgrows what came before";
      EXPECT_LT(slice.bytes, std::max(first, after) + 2 * first) << "outgrows what follows";
    }
    sliceStarts.push_back(at);
    at += slice.bytes;
    before += slice.bytes;
  }
  ASSERT_EQ(stream + 1, streams.length.size()) << "streams left out";
  ASSERT_EQ(at, streams.length.back()) << "the last stream left unfinished";

  // Each piece's bytes in order, each part where the stream has it.
  const std::vector<SlicePart> parts = sliceParts(plan, slices);
  std::vector<std::uint64_t> covered(plan.pieces().size(), 0);
  std::size_t piece = 0;
  for (const SlicePart& part : parts) {
    ASSERT_LT(part.slice, slices.size());
    ASSERT_GT(part.bytes, 0U);
    ASSERT_LE(part.sliceOffset + part.bytes, slices[part.slice].bytes) << "a part past its slice";
    while (piece < plan.pieces().size() && covered[piece] == plan.pieces()[piece].bytes) ++piece;
    ASSERT_LT(piece, plan.pieces().size()) << "more parts than pieces";
    const Piece& whole = plan.pieces()[piece];
    ASSERT_EQ(part.tensor, whole.tensor);
    ASSERT_EQ(part.tensorOffset, whole.tensorOffset + covered[piece]) << "a piece's bytes out of order";
    ASSERT_EQ(sliceStarts[part.slice] + part.sliceOffset,
              streams.start[whole.bucket] + whole.bucketOffset + covered[piece])
        << "a part away from where its stream holds it";
    ASSERT_EQ(streams.of[slices[part.slice].bucket], streams.of[whole.bucket]);
    if (slices[part.slice].direct) {
      EXPECT_EQ(part.bytes, slices[part.slice].bytes) << "a direct slice in parts";
    }
    covered[piece] += part.bytes;
    ASSERT_LE(covered[piece], whole.bytes);
  }
  for (std::size_t index = 0; index < covered.size(); ++index) {
    ASSERT_EQ(covered[index], plan.pieces()[index].bytes) << "piece " << index << " not wholly covered";
  }
}

TEST(BroadcastSlices, WithoutAFirstSliceEveryStreamInEvenSlicesOfABucket) {
  const BucketPlan plan = planOf("opt-125m", 16 * kMiB);
  const auto slices = broadcastSlices(plan, 0);
  expectTiles(plan, slices, 0);
  std::uint64_t total = 0;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) total += plan.bucketUsedBytes(bucket);
  EXPECT_LE(slices.size(), total / plan.bucketBytes() + 2 * plan.bucketCount());
  for (const BroadcastSlice& slice : slices) EXPECT_LE(slice.bytes, 16 * kMiB);
}

// Four tensors of a bucket each (four direct streams): up from 64 MiB by doubling, two whole buckets, down again.
TEST(BroadcastSlices, RampUpAndDownAroundWholeBuckets) {
  const BucketPlan plan = planOfSizes({kGiB, kGiB, kGiB, kGiB}, kGiB);
  const auto slices = broadcastSlices(plan, 64 * kMiB);
  EXPECT_EQ(mibOf(slices), (std::vector<std::uint64_t>{64, 64, 128, 256, 512, 1024, 1024, 512, 256, 128, 64, 64}));
  for (const BroadcastSlice& slice : slices) EXPECT_TRUE(slice.direct);
  expectTiles(plan, slices, 64 * kMiB);
}

// Staging buffers of half a bucket (the channel's default): the same ramp, capped at 512 MiB.
TEST(BroadcastSlices, HalfBucketSlicesCapTheRamp) {
  const BucketPlan plan = planOfSizes({kGiB, kGiB, kGiB, kGiB}, kGiB);
  const auto slices = broadcastSlices(plan, 64 * kMiB, 512 * kMiB);
  EXPECT_EQ(mibOf(slices),
            (std::vector<std::uint64_t>{64, 64, 128, 256, 512, 512, 512, 512, 512, 512, 256, 128, 64, 64}));
  expectTiles(plan, slices, 64 * kMiB, 512 * kMiB);
}

// Without a ramp, a cap cuts each stream larger than it into even slices (no sliver at its end).
TEST(BroadcastSlices, CapWithoutARampCutsStreamsEvenly) {
  const BucketPlan plan = planOfSizes({kGiB, 800 * kMiB}, kGiB);
  const auto slices = broadcastSlices(plan, 0, 512 * kMiB);
  EXPECT_EQ(mibOf(slices), (std::vector<std::uint64_t>{512, 512, 400, 400}));
  expectTiles(plan, slices, 0, 512 * kMiB);
}

// 100,000 tensors of 43 KB in 1 GiB buckets, the last holding 5 MB: one packed stream, whose ramp runs across the
// bucket boundaries and down to the first slice's size, the 5 MB joining the last slice rather than being a
// broadcast of its own after a 124 MiB one (what per-bucket slices made of it: the last unpacks, which nothing
// overlaps, twice as long).
TEST(BroadcastSlices, PackedBucketsAreOneStream) {
  const BucketPlan plan = planOf("synthetic:100000:4096", kGiB);
  ASSERT_EQ(plan.bucketCount(), 5U);
  const auto slices = broadcastSlices(plan, 64 * kMiB, 512 * kMiB);
  expectTiles(plan, slices, 64 * kMiB, 512 * kMiB);
  const auto sizes = mibOf(slices);
  ASSERT_GE(sizes.size(), 10U);
  EXPECT_EQ(std::vector<std::uint64_t>(sizes.begin(), sizes.begin() + 5),
            (std::vector<std::uint64_t>{64, 64, 128, 256, 512}));
  EXPECT_EQ(sizes[sizes.size() - 2], 64U);
  EXPECT_GE(sizes.back(), 64U);
  EXPECT_LT(sizes.back(), 128U);
  EXPECT_EQ(slices.back().bucket, 3U) << "the last bucket's 5 MB a broadcast of its own";
  EXPECT_LE(slices.size(), 14U);
  bool spans = false;  // some slice runs over a bucket boundary
  for (const BroadcastSlice& slice : slices) spans |= slice.offset + slice.bytes > plan.bucketUsedBytes(slice.bucket);
  EXPECT_TRUE(spans);
}

// The catalog's shapes at every bucket size the benchmarks sweep, uncapped and capped at half a bucket: a first
// broadcast no larger than the first slice, a last under twice it, and a few ramp steps more than the transfer over
// the cap.
TEST(BroadcastSlices, CatalogModelsAtEveryBucketSize) {
  constexpr std::uint64_t kFirst = 64 * kMiB;
  for (const char* model : {"synthetic:100000:4096", "deepseek-v3:5", "qwen2.5-7b", "opt-125m", "tiny"}) {
    for (const std::uint64_t bucket : {256 * kMiB, kGiB, 4 * kGiB}) {
      for (const std::uint64_t largest : {std::uint64_t{0}, bucket / 2}) {
        SCOPED_TRACE(std::string(model) + ", bucket " + std::to_string(bucket / kMiB) + " MiB, cap " +
                     std::to_string(largest / kMiB) + " MiB");
        const BucketPlan plan = planOf(model, bucket);
        const auto slices = broadcastSlices(plan, kFirst, largest);
        expectTiles(plan, slices, kFirst, largest);
        ASSERT_FALSE(slices.empty());
        EXPECT_LE(slices.front().bytes, kFirst);
        EXPECT_LT(slices.back().bytes, 2 * kFirst);
        const std::uint64_t cap = largest != 0 ? largest : bucket;
        const auto rampSteps = static_cast<std::size_t>(std::bit_width(cap / kFirst));
        std::uint64_t total = 0;
        for (std::uint32_t at = 0; at < plan.bucketCount(); ++at) total += plan.bucketUsedBytes(at);
        // A direct bucket among packed ones ends a stream: its tail and the next stream's head may each cost one.
        std::size_t streams = 0;
        for (std::uint32_t at = 0; at < plan.bucketCount(); ++at) {
          streams += at == 0 || bucketIsDirect(plan, at) || bucketIsDirect(plan, at - 1) ? 1U : 0U;
        }
        EXPECT_LE(slices.size(), total / cap + 2 * rampSteps + 2 * streams + 2);
        EXPECT_EQ(slices, broadcastSlices(plan, kFirst, largest));
      }
    }
  }
}

// Buckets smaller than the cap, between direct ones: the packed buckets between two direct ones share broadcasts.
TEST(BroadcastSlices, SmallPackedBucketsShareBroadcasts) {
  const BucketPlan plan = planOfSizes({100'000, 3, 70'000, 200'000, 5, 7}, 64 * 1024);
  for (const std::uint64_t first : {std::uint64_t{0}, kSliceAlignment}) {
    SCOPED_TRACE("first slice " + std::to_string(first));
    const auto slices = broadcastSlices(plan, first, 1 * kMiB);
    expectTiles(plan, slices, first, 1 * kMiB);
    std::size_t direct = 0;
    for (const BroadcastSlice& slice : slices) direct += slice.direct ? 1U : 0U;
    EXPECT_GE(direct, 2U);
    if (first == 0) {
      EXPECT_LT(slices.size(), plan.bucketCount());
    }
  }
}

// Buckets whose used bytes are no multiple of kSliceAlignment (a bucket of 64 KiB + 256 bytes), and slices smaller
// than a bucket: the next bucket starts at the next multiple in the stream, and slices run over the boundary with
// the padding in their count.
TEST(BroadcastSlices, OddBucketEndsArePadded) {
  const BucketPlan plan = planOfSizes({5'000, 3, 70'000, 7, 9'000, 200'000, 11}, 64 * 1024 + 256);
  ASSERT_GE(plan.bucketCount(), 2U);
  for (const auto& [first, largest] :
       {std::pair{kSliceAlignment, 4 * kSliceAlignment}, std::pair{std::uint64_t{0}, kMiB}}) {
    SCOPED_TRACE("first slice " + std::to_string(first) + ", cap " + std::to_string(largest));
    const auto slices = broadcastSlices(plan, first, largest);
    expectTiles(plan, slices, first, largest);
    bool spans = false;
    for (const BroadcastSlice& slice : slices) spans |= slice.offset + slice.bytes > plan.bucketUsedBytes(slice.bucket);
    EXPECT_TRUE(spans);
  }
  bool odd = false;
  for (std::uint32_t bucket = 0; bucket + 1 < plan.bucketCount(); ++bucket) {
    odd |= plan.bucketUsedBytes(bucket) % kSliceAlignment != 0;
  }
  EXPECT_TRUE(odd) << "no bucket but the last ends off the alignment: the padding goes untested";
}

}  // namespace
}  // namespace wsync::bus
