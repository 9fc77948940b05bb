#include "wsync/bus/channel/bucket_plan.hpp"

#include <bit>
#include <limits>

namespace wsync::bus {

tl::expected<BucketPlan, ManifestFailure> BucketPlan::build(const Manifest& manifest, std::uint64_t bucketBytes,
                                                            std::uint32_t alignment) {
  std::vector<std::uint64_t> sizes(manifest.size());
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) sizes[tensor] = manifest.tensorBytes(tensor);
  return fromSizes(sizes, bucketBytes, alignment);
}

tl::expected<BucketPlan, ManifestFailure> BucketPlan::fromSizes(std::span<const std::uint64_t> sizes,
                                                                std::uint64_t bucketBytes, std::uint32_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    return fail(ManifestError::InvalidPlan, "alignment " + std::to_string(alignment) + " is not a power of two");
  }
  if (bucketBytes < alignment || bucketBytes % alignment != 0) {
    return fail(ManifestError::InvalidPlan, "bucket size " + std::to_string(bucketBytes) +
                                                " is not a positive multiple of the alignment " +
                                                std::to_string(alignment));
  }
  if (sizes.size() >= std::numeric_limits<std::uint32_t>::max()) {
    return fail(ManifestError::InvalidPlan, std::to_string(sizes.size()) + " runs are too many for one plan");
  }
  // Bounds the plan's memory: pieces <= tensors + buckets.
  std::uint64_t totalBytes = 0;
  for (const std::uint64_t size : sizes) {
    if (size > std::numeric_limits<std::uint64_t>::max() - totalBytes) {
      return fail(ManifestError::InvalidPlan, "the runs' sizes overflow 64 bits");
    }
    totalBytes += size;
  }
  if (totalBytes / bucketBytes > std::numeric_limits<std::uint32_t>::max() / 2) {
    return fail(ManifestError::InvalidPlan, "bucket size " + std::to_string(bucketBytes) + " makes too many buckets");
  }

  BucketPlan plan;
  plan.bucketBytes_ = bucketBytes;
  plan.alignment_ = alignment;
  plan.tensorFirstPiece_.reserve(sizes.size() + 1);
  const std::uint64_t mask = alignment - 1U;
  std::uint32_t bucket = 0;
  std::uint64_t offset = 0;  // next free byte in `bucket`
  for (std::uint32_t tensor = 0; tensor < sizes.size(); ++tensor) {
    plan.tensorFirstPiece_.push_back(static_cast<std::uint32_t>(plan.pieces_.size()));
    std::uint64_t remaining = sizes[tensor];
    if (remaining == 0) continue;
    offset = (offset + mask) & ~mask;
    if (offset == bucketBytes) {
      ++bucket;
      offset = 0;
    }
    std::uint64_t tensorOffset = 0;
    while (remaining > 0) {
      const std::uint64_t run = std::min(remaining, bucketBytes - offset);
      plan.pieces_.push_back(Piece{tensor, bucket, offset, tensorOffset, run});
      remaining -= run;
      tensorOffset += run;
      offset += run;
      if (offset == bucketBytes && remaining > 0) {
        ++bucket;
        offset = 0;
      }
    }
  }
  plan.tensorFirstPiece_.push_back(static_cast<std::uint32_t>(plan.pieces_.size()));

  // Per-bucket index: pieces are already in bucket order.
  const std::uint32_t buckets = plan.pieces_.empty() ? 0 : plan.pieces_.back().bucket + 1;
  plan.bucketEnds_.assign(buckets, 0);
  plan.bucketFirstPiece_.assign(buckets + 1, static_cast<std::uint32_t>(plan.pieces_.size()));
  for (std::uint32_t index = static_cast<std::uint32_t>(plan.pieces_.size()); index-- > 0;) {
    const Piece& piece = plan.pieces_[index];
    plan.bucketFirstPiece_[piece.bucket] = index;
    plan.bucketEnds_[piece.bucket] = std::max(plan.bucketEnds_[piece.bucket], piece.bucketOffset + piece.bytes);
  }
  return plan;
}

std::span<const Piece> BucketPlan::piecesOfBucket(std::uint32_t bucket) const {
  return std::span(pieces_).subspan(bucketFirstPiece_[bucket],
                                    bucketFirstPiece_[bucket + 1] - bucketFirstPiece_[bucket]);
}

std::span<const Piece> BucketPlan::piecesOfTensor(std::uint32_t tensor) const {
  return std::span(pieces_).subspan(tensorFirstPiece_[tensor],
                                    tensorFirstPiece_[tensor + 1] - tensorFirstPiece_[tensor]);
}

}  // namespace wsync::bus
