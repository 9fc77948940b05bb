#pragma once
// Where every byte of a version goes in the payload buckets (docs/bucket-plan.md). A pure function of the ordered
// manifest, the bucket size and the alignment: trainer and workers compute the same plan, so the coordinator sends
// three numbers per round instead of one entry per tensor.
#include <cstdint>
#include <span>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::bus {

// A contiguous run of one tensor's bytes inside one bucket.
struct Piece {
  std::uint32_t tensor = 0;  // index in the manifest
  std::uint32_t bucket = 0;
  std::uint64_t bucketOffset = 0;  // where the run starts in the bucket
  std::uint64_t tensorOffset = 0;  // where the run starts in the tensor
  std::uint64_t bytes = 0;

  friend bool operator==(const Piece&, const Piece&) = default;
};

class BucketPlan {
 public:
  // Tensors are packed in manifest order, each starting at a multiple of `alignment` (a power of two); a tensor
  // that does not fit in what is left of a bucket continues at the start of the next, so every bucket but the
  // last is full up to alignment padding. Zero-byte tensors get no piece.
  static tl::expected<BucketPlan, ManifestFailure> build(const Manifest& manifest, std::uint64_t bucketBytes,
                                                         std::uint32_t alignment);
  // The same packing of a list of byte runs, "tensor" i being `sizes[i]` bytes: what a region source's stream of
  // segments is cut into (shm/region_stream.hpp), where the runs are segments rather than manifest tensors.
  static tl::expected<BucketPlan, ManifestFailure> fromSizes(std::span<const std::uint64_t> sizes,
                                                             std::uint64_t bucketBytes, std::uint32_t alignment);

  std::uint64_t bucketBytes() const { return bucketBytes_; }
  std::uint32_t alignment() const { return alignment_; }
  std::uint32_t bucketCount() const { return static_cast<std::uint32_t>(bucketEnds_.size()); }
  // Bytes used in `bucket`, padding between pieces included: what must be moved for it.
  std::uint64_t bucketUsedBytes(std::uint32_t bucket) const { return bucketEnds_[bucket]; }

  // Pieces in bucket order, and within a bucket by offset.
  const std::vector<Piece>& pieces() const { return pieces_; }
  std::span<const Piece> piecesOfBucket(std::uint32_t bucket) const;
  std::span<const Piece> piecesOfTensor(std::uint32_t tensor) const;

 private:
  BucketPlan() = default;

  std::uint64_t bucketBytes_ = 0;
  std::uint32_t alignment_ = 1;
  std::vector<Piece> pieces_;
  std::vector<std::uint64_t> bucketEnds_;        // used bytes per bucket
  std::vector<std::uint32_t> bucketFirstPiece_;  // index into pieces_, one past the end at [bucketCount]
  std::vector<std::uint32_t> tensorFirstPiece_;  // index into pieces_, one past the end at [tensor count]
};

}  // namespace wsync::bus
