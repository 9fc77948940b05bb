#include "wsync/bus/channel/nccl/broadcast_slices.hpp"

#include <algorithm>

namespace wsync::bus {
namespace {

std::uint64_t alignUp(std::uint64_t bytes) { return (bytes + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment; }

// A run of consecutive packed buckets, or one direct bucket: the bytes slices follow without a break.
struct Stream {
  std::uint32_t firstBucket = 0;
  std::uint32_t endBucket = 0;  // past its last
  bool direct = false;
  std::uint64_t bytes = 0;  // packed: each bucket but the last padded to kSliceAlignment
};

// The streams of `plan`, and where each bucket starts in its stream.
std::vector<Stream> streamsOf(const BucketPlan& plan, std::vector<std::uint64_t>& bucketStarts) {
  std::vector<Stream> streams;
  bucketStarts.assign(plan.bucketCount(), 0);
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    const bool direct = bucketIsDirect(plan, bucket);
    if (direct || streams.empty() || streams.back().direct) {
      streams.push_back(Stream{.firstBucket = bucket, .endBucket = bucket, .direct = direct, .bytes = 0});
    } else {
      streams.back().bytes = alignUp(streams.back().bytes);
    }
    bucketStarts[bucket] = streams.back().bytes;
    streams.back().bytes += plan.bucketUsedBytes(bucket);
    streams.back().endBucket = bucket + 1;
  }
  return streams;
}

}  // namespace

bool bucketIsDirect(const BucketPlan& plan, std::uint32_t bucket) {
  const auto pieces = plan.piecesOfBucket(bucket);
  return pieces.size() == 1 && pieces[0].bucketOffset == 0 && pieces[0].bytes == plan.bucketUsedBytes(bucket);
}

std::vector<BroadcastSlice> broadcastSlices(const BucketPlan& plan, std::uint64_t firstSliceBytes,
                                            std::uint64_t maxSliceBytes) {
  const std::uint64_t largest = maxSliceBytes == 0
                                    ? alignUp(plan.bucketBytes())
                                    : std::max(kSliceAlignment, maxSliceBytes / kSliceAlignment * kSliceAlignment);
  firstSliceBytes = std::min(firstSliceBytes, largest);
  std::vector<std::uint64_t> bucketStarts;
  const std::vector<Stream> streams = streamsOf(plan, bucketStarts);
  std::uint64_t total = 0;
  for (const Stream& stream : streams) total += stream.bytes;

  std::vector<BroadcastSlice> slices;
  std::uint64_t before = 0;  // the transfer's bytes in earlier slices
  for (const Stream& stream : streams) {
    std::uint32_t bucket = stream.firstBucket;  // the bucket `offset` lies in
    std::uint64_t offset = 0;                   // in the stream
    while (offset < stream.bytes) {
      const std::uint64_t left = stream.bytes - offset;
      // Without a ramp: the stream in even slices within the largest (no sliver at its end).
      const std::uint64_t cuts = left / largest + (left % largest != 0 ? 1 : 0);
      std::uint64_t bytes = std::min(left, alignUp((left + cuts - 1) / cuts));
      if (firstSliceBytes != 0) {
        // No larger than what came before, nor than what comes after (bytes <= total - before - bytes).
        const std::uint64_t limit =
            std::min({std::max(firstSliceBytes, before), std::max(firstSliceBytes, (total - before) / 2), largest});
        bytes = std::max(kSliceAlignment, limit / kSliceAlignment * kSliceAlignment);
        // The rest of the stream whole rather than a sliver of it as a broadcast of its own; where the whole would
        // outgrow the largest slice, in two halves (each within it, as the rest is under largest + firstSliceBytes).
        if (bytes >= left || left - bytes < firstSliceBytes) bytes = left <= largest ? left : alignUp(left / 2);
      }
      // Slices start at multiples of kSliceAlignment in the stream, so never in the padding after a bucket.
      while (bucket + 1 < stream.endBucket && bucketStarts[bucket + 1] <= offset) ++bucket;
      slices.push_back(BroadcastSlice{
          .bucket = bucket, .offset = offset - bucketStarts[bucket], .bytes = bytes, .direct = stream.direct});
      offset += bytes;
      before += bytes;
    }
  }
  return slices;
}

std::vector<SlicePart> sliceParts(const BucketPlan& plan, const std::vector<BroadcastSlice>& slices) {
  std::vector<std::uint64_t> bucketStarts;
  const std::vector<Stream> streams = streamsOf(plan, bucketStarts);
  std::vector<std::uint32_t> streamEnds(plan.bucketCount());  // of each bucket's stream
  for (const Stream& stream : streams) {
    std::fill(streamEnds.begin() + stream.firstBucket, streamEnds.begin() + stream.endBucket, stream.endBucket);
  }
  std::vector<SlicePart> parts;
  parts.reserve(plan.pieces().size() + slices.size());
  // The first piece of each bucket that may still have bytes in a later slice (slices come in order).
  std::vector<std::size_t> firstPiece(plan.bucketCount(), 0);
  for (std::uint32_t index = 0; index < slices.size(); ++index) {
    const BroadcastSlice& slice = slices[index];
    const std::uint64_t sliceStart = bucketStarts[slice.bucket] + slice.offset;  // in the stream
    const std::uint64_t sliceEnd = sliceStart + slice.bytes;
    // The buckets the slice runs over: its first, and the packed ones after it in the same stream.
    for (std::uint32_t bucket = slice.bucket;
         bucket < streamEnds[slice.bucket] && (bucket == slice.bucket || bucketStarts[bucket] < sliceEnd); ++bucket) {
      const auto pieces = plan.piecesOfBucket(bucket);
      std::size_t& first = firstPiece[bucket];
      for (std::size_t at = first; at < pieces.size(); ++at) {
        const Piece& piece = pieces[at];
        const std::uint64_t pieceStart = bucketStarts[bucket] + piece.bucketOffset;
        if (pieceStart >= sliceEnd) break;
        const std::uint64_t from = std::max(pieceStart, sliceStart);
        const std::uint64_t to = std::min(pieceStart + piece.bytes, sliceEnd);
        if (to > from) {
          parts.push_back(SlicePart{.slice = index,
                                    .tensor = piece.tensor,
                                    .tensorOffset = piece.tensorOffset + (from - pieceStart),
                                    .sliceOffset = from - sliceStart,
                                    .bytes = to - from});
        }
      }
      while (first < pieces.size() &&
             bucketStarts[bucket] + pieces[first].bucketOffset + pieces[first].bytes <= sliceEnd) {
        ++first;
      }
    }
  }
  return parts;
}

}  // namespace wsync::bus
