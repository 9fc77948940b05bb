// The bucket plan: every byte of every tensor lands exactly once, aligned, in bucket order; tensors larger than a
// bucket span several; the plan depends only on its inputs.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "wsync/bus/channel/bucket_plan.hpp"

namespace wsync::bus {
namespace {

Manifest manifestOf(const std::vector<std::uint64_t>& byteSizes) {
  std::vector<TensorSpec> tensors;
  for (std::size_t i = 0; i < byteSizes.size(); ++i) {
    tensors.push_back({"t" + std::to_string(i), msg::DType::U8, {static_cast<std::int64_t>(byteSizes[i])}});
  }
  return *Manifest::create(std::move(tensors));
}

// Checks the invariants every plan must hold.
void expectCovers(const Manifest& manifest, const BucketPlan& plan) {
  std::uint64_t placed = 0;
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) {
    std::uint64_t next = 0;  // each tensor's pieces are contiguous runs in order
    for (const Piece& piece : plan.piecesOfTensor(tensor)) {
      ASSERT_EQ(piece.tensor, tensor);
      ASSERT_EQ(piece.tensorOffset, next);
      ASSERT_GT(piece.bytes, 0U);
      ASSERT_LE(piece.bucketOffset + piece.bytes, plan.bucketBytes());
      next += piece.bytes;
    }
    ASSERT_EQ(next, manifest.tensorBytes(tensor)) << "tensor " << tensor;
    if (const auto pieces = plan.piecesOfTensor(tensor); !pieces.empty()) {
      ASSERT_EQ(pieces.front().bucketOffset % plan.alignment(), 0U) << "tensor " << tensor << " starts unaligned";
      for (std::size_t i = 1; i < pieces.size(); ++i) ASSERT_EQ(pieces[i].bucketOffset, 0U);
    }
    placed += next;
  }
  EXPECT_EQ(placed, manifest.totalBytes());
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    std::uint64_t end = 0;
    const auto pieces = plan.piecesOfBucket(bucket);
    ASSERT_FALSE(pieces.empty()) << "bucket " << bucket << " is empty";
    for (const Piece& piece : pieces) {
      ASSERT_EQ(piece.bucket, bucket);
      ASSERT_GE(piece.bucketOffset, end) << "pieces overlap in bucket " << bucket;
      end = piece.bucketOffset + piece.bytes;
    }
    EXPECT_EQ(plan.bucketUsedBytes(bucket), end);
  }
}

TEST(BucketPlan, PacksSmallTensorsWithAlignment) {
  const Manifest manifest = manifestOf({10, 20, 30});
  auto plan = BucketPlan::build(manifest, 256, 16);
  ASSERT_TRUE(plan.has_value()) << plan.error().describe();
  ASSERT_EQ(plan->bucketCount(), 1U);
  ASSERT_EQ(plan->pieces().size(), 3U);
  EXPECT_EQ(plan->pieces()[0], (Piece{0, 0, 0, 0, 10}));
  EXPECT_EQ(plan->pieces()[1], (Piece{1, 0, 16, 0, 20}));
  EXPECT_EQ(plan->pieces()[2], (Piece{2, 0, 48, 0, 30}));
  EXPECT_EQ(plan->bucketUsedBytes(0), 78U);
  expectCovers(manifest, *plan);
}

TEST(BucketPlan, SplitsATensorAcrossBuckets) {
  const Manifest manifest = manifestOf({100, 300, 5});
  auto plan = BucketPlan::build(manifest, 128, 8);
  ASSERT_TRUE(plan.has_value());
  // t0 [0,100) in b0; t1 starts at 104: 24 bytes in b0, 128 in b1, 128 in b2, 20 in b3; t2 at 24 in b3.
  const std::vector<Piece> expected{{0, 0, 0, 0, 100},   {1, 0, 104, 0, 24}, {1, 1, 0, 24, 128},
                                    {1, 2, 0, 152, 128}, {1, 3, 0, 280, 20}, {2, 3, 24, 0, 5}};
  EXPECT_EQ(plan->pieces(), expected);
  EXPECT_EQ(plan->bucketCount(), 4U);
  EXPECT_EQ(plan->piecesOfTensor(1).size(), 4U);
  expectCovers(manifest, *plan);
}

TEST(BucketPlan, ExactFitsStartTheNextBucket) {
  const Manifest manifest = manifestOf({64, 64, 1});
  auto plan = BucketPlan::build(manifest, 64, 64);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->bucketCount(), 3U);
  EXPECT_EQ(plan->pieces()[2], (Piece{2, 2, 0, 0, 1}));
  expectCovers(manifest, *plan);
}

TEST(BucketPlan, ZeroByteTensorsGetNoPiece) {
  const Manifest manifest = manifestOf({0, 7, 0});
  auto plan = BucketPlan::build(manifest, 64, 4);
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->piecesOfTensor(0).empty());
  EXPECT_TRUE(plan->piecesOfTensor(2).empty());
  EXPECT_EQ(plan->pieces().size(), 1U);
  expectCovers(manifest, *plan);
}

TEST(BucketPlan, RandomManifestsHoldTheInvariants) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::uint64_t> sizes(1 + random() % 50);
    for (auto& size : sizes) size = random() % 4 == 0 ? random() % 5000 : random() % 300;
    const std::uint32_t alignment = 1U << (random() % 9);
    const std::uint64_t bucket = alignment * (1 + random() % 64);
    const Manifest manifest = manifestOf(sizes);
    auto plan = BucketPlan::build(manifest, bucket, alignment);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    SCOPED_TRACE("trial " + std::to_string(trial));
    expectCovers(manifest, *plan);
    // Deterministic: what trainer and workers compute separately must agree.
    EXPECT_EQ(BucketPlan::build(manifest, bucket, alignment)->pieces(), plan->pieces());
    // A list of sizes packs as a manifest of tensors of those sizes (a region source's segments).
    auto fromSizes = BucketPlan::fromSizes(sizes, bucket, alignment);
    ASSERT_TRUE(fromSizes.has_value()) << fromSizes.error().describe();
    EXPECT_EQ(fromSizes->pieces(), plan->pieces());
    EXPECT_EQ(fromSizes->bucketCount(), plan->bucketCount());
  }
}

TEST(BucketPlan, RefusesBadParameters) {
  const Manifest manifest = manifestOf({10});
  EXPECT_EQ(BucketPlan::build(manifest, 64, 0).error().code, ManifestError::InvalidPlan);
  EXPECT_EQ(BucketPlan::build(manifest, 64, 3).error().code, ManifestError::InvalidPlan);
  EXPECT_EQ(BucketPlan::build(manifest, 100, 64).error().code, ManifestError::InvalidPlan);
  EXPECT_EQ(BucketPlan::build(manifest, 0, 1).error().code, ManifestError::InvalidPlan);
  const std::vector<std::uint64_t> overflowing = {~std::uint64_t{0}, 1};
  EXPECT_EQ(BucketPlan::fromSizes(overflowing, 64, 64).error().code, ManifestError::InvalidPlan);
  EXPECT_TRUE(BucketPlan::fromSizes({}, 64, 64).has_value());
}

// A Qwen3-30B-A3B-shaped manifest (18,867 tensors, 61 GB) plans in one pass with pieces <= tensors + buckets.
TEST(BucketPlan, LargeMoeManifest) {
  std::vector<TensorSpec> tensors;
  for (int layer = 0; layer < 48; ++layer) {
    for (int expert = 0; expert < 128; ++expert) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        tensors.push_back({"model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + "." +
                               proj + ".weight",
                           msg::DType::BF16,
                           {768, 2048}});
      }
    }
  }
  auto manifest = Manifest::create(std::move(tensors));
  ASSERT_TRUE(manifest.has_value());
  auto plan = BucketPlan::build(*manifest, std::uint64_t{1} << 30, 256);
  ASSERT_TRUE(plan.has_value());
  EXPECT_LE(plan->pieces().size(), manifest->size() + plan->bucketCount());
  EXPECT_EQ(plan->bucketCount(), (manifest->totalBytes() + (1ULL << 30) - 1) >> 30);
  expectCovers(*manifest, *plan);
}

}  // namespace
}  // namespace wsync::bus
