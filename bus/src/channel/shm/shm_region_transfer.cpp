#include "channel/shm/shm_region_transfer.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "channel/shm/digest_copy.hpp"
#include "wsync/bus/channel/shm/region_stream.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {
namespace {

// A segment's byte runs in one buffer (RegionPlan::sourceRuns or destinationRuns), with where each starts in the
// segment's byte order: a piece of a bucket, a range of the segment's bytes, finds its runs by one search.
class SegmentRuns {
 public:
  explicit SegmentRuns(std::vector<ByteRun> runs) : runs_(std::move(runs)), starts_(runs_.size()) {
    for (std::size_t index = 0; index < runs_.size(); ++index) {
      starts_[index] = bytes_;
      bytes_ += runs_[index].bytes;
      end_ = std::max(end_, runs_[index].offset + runs_[index].bytes);
    }
  }

  // The segment's bytes, and how far into its buffer they reach.
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t end() const { return end_; }

  // Calls visit(buffer offset, offset in the range, bytes) for the parts of the segment's bytes [from, from + bytes)
  // in order; the range must lie within bytes().
  template <typename Visit>
  void forEach(std::uint64_t from, std::uint64_t bytes, Visit&& visit) const {
    auto index = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), from) - starts_.begin()) - 1;
    for (std::uint64_t done = 0; done < bytes; ++index) {
      const std::uint64_t into = from + done - starts_[index];
      const std::uint64_t part = std::min(runs_[index].bytes - into, bytes - done);
      visit(runs_[index].offset + into, done, part);
      done += part;
    }
  }

 private:
  std::vector<ByteRun> runs_;
  std::vector<std::uint64_t> starts_;
  std::uint64_t bytes_ = 0;
  std::uint64_t end_ = 0;
};

// The digest of no bytes: a segment of none, on both sides.
Digest emptyDigest() { return StreamDigest().digest(); }

tl::unexpected<ChannelFailure> named(ChannelFailure failure, const std::string& who) {
  failure.detail = who + ": " + failure.detail;
  return tl::unexpected(std::move(failure));
}

std::string sourceName(std::uint32_t source) { return "source " + std::to_string(source); }
std::string pairName(std::uint32_t source, std::uint32_t receiver) {
  return "receiver " + std::to_string(receiver) + " taking from source " + std::to_string(source);
}

}  // namespace

tl::expected<RegionTransferResult, ChannelFailure> sendRegionStream(const ShmArena& ring, std::uint64_t transfer,
                                                                    const RegionPlan& plan, std::uint32_t source,
                                                                    std::span<const std::span<const std::byte>> buffers,
                                                                    std::chrono::steady_clock::time_point deadline,
                                                                    const std::function<void(std::uint64_t)>& progress,
                                                                    const std::function<bool()>& cancelled) {
  const ArenaGeometry& geometry = ring.geometry();
  if (plan.receiverCount() > geometry.maxReceivers) {
    return fail(ChannelError::PlanMismatch, std::to_string(plan.receiverCount()) + " receivers exceed ring " +
                                                ring.name() + "'s " + std::to_string(geometry.maxReceivers));
  }
  auto stream = RegionStream::build(plan, source, geometry.bucketBytes);
  if (!stream) return tl::unexpected(stream.error());

  // Every segment's runs, checked against the bound buffers before any byte moves: no plan, however wrong, makes a
  // process read outside what it bound.
  const std::span<const std::uint32_t> order = plan.segmentsOf(source);
  std::vector<SegmentRuns> runs;
  std::vector<const std::byte*> from(order.size());
  runs.reserve(order.size());
  for (std::size_t position = 0; position < order.size(); ++position) {
    const Segment& segment = plan.segments()[order[position]];
    if (segment.held >= buffers.size()) {
      return fail(ChannelError::PlanMismatch, sourceName(source) + "'s region " + std::to_string(segment.held) +
                                                  " has no buffer (" + std::to_string(buffers.size()) + " bound)");
    }
    runs.emplace_back(plan.sourceRuns(segment));
    if (runs.back().bytes() != segment.bytes || runs.back().end() > buffers[segment.held].size()) {
      return fail(ChannelError::PlanMismatch, sourceName(source) + "'s region " + std::to_string(segment.held) +
                                                  " needs " + std::to_string(runs.back().end()) +
                                                  " bytes, the bound buffer has " +
                                                  std::to_string(buffers[segment.held].size()));
    }
    from[position] = buffers[segment.held].data();
  }

  // Each segment is digested once, as it is packed, however many receivers take it.
  std::vector<Digest> digests(order.size(), emptyDigest());
  std::optional<StreamDigest> digest;
  std::uint32_t digesting = 0;  // the segment `digest` is of, once it has one
  std::uint64_t packed = 0;
  const BucketPlan& buckets = stream->buckets();
  const std::uint32_t bufferCount = geometry.bufferCount;
  for (std::uint32_t bucket = 0; bucket < buckets.bucketCount(); ++bucket) {
    if (bucket >= bufferCount) {
      // The buffer still holds bucket - bufferCount until the receivers it was for have copied it out; the others
      // never read it. Its own predecessors were drained before it went in, so these are all that can still read.
      const std::uint32_t previous = bucket - bufferCount;
      auto drained = ring.awaitDrained(transfer, previous, stream->receiversOf(previous), deadline, cancelled);
      if (!drained) return named(std::move(drained.error()), sourceName(source));
    }
    std::byte* target = ring.bucketBuffer(bucket);
    for (const Piece& piece : buckets.piecesOfBucket(bucket)) {
      if (!digest || piece.tensor != digesting) {
        if (digest) digests[digesting] = digest->digest();
        digest.emplace();
        digesting = piece.tensor;
      }
      runs[piece.tensor].forEach(
          piece.tensorOffset, piece.bytes, [&](std::uint64_t offset, std::uint64_t at, std::uint64_t bytes) {
            packAndDigest(target + piece.bucketOffset + at, from[piece.tensor] + offset, bytes, *digest);
          });
      packed += piece.bytes;
    }
    ring.publishFilled(transfer, bucket);
    if (progress) progress(packed);
  }
  if (digest) digests[digesting] = digest->digest();

  // As ShmArena::send: return only once every receiver has drained every bucket it takes, so that a next transfer
  // refilling the ring at once replaces nothing unread. A bucket followed in its buffer by another was drained before
  // that one went in; what is left is the last bucket each buffer held.
  const std::uint32_t count = buckets.bucketCount();
  for (std::uint32_t bucket = count > bufferCount ? count - bufferCount : 0; bucket < count; ++bucket) {
    auto drained = ring.awaitDrained(transfer, bucket, stream->receiversOf(bucket), deadline, cancelled);
    if (!drained) return named(std::move(drained.error()), sourceName(source));
  }

  // Each receiver's pair digest, over its deliveries in send order (region_transfer.hpp).
  RegionTransferResult result(plan.receiverCount());
  for (std::uint32_t receiver = 0; receiver < plan.receiverCount(); ++receiver) {
    PairDigest pair;
    for (const Delivery& delivery : plan.deliveries(source, receiver)) {
      const std::uint32_t position = stream->positionOf(delivery.segment);
      if (position == stream->segmentCount()) {
        return fail(ChannelError::PlanMismatch, sourceName(source) + " does not send segment " +
                                                    std::to_string(delivery.segment) + " of receiver " +
                                                    std::to_string(receiver));
      }
      pair.add(plan.segments()[delivery.segment].bytes, digests[position]);
    }
    result[receiver] = pair.result();
  }
  return result;
}

tl::expected<PairResult, ChannelFailure> receiveRegionStream(
    const ShmArena& ring, std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline,
    const std::function<void(std::uint64_t)>& progress, const std::function<bool()>& cancelled) {
  const ArenaGeometry& geometry = ring.geometry();
  if (receiver >= plan.receiverCount() || plan.receiverCount() > geometry.maxReceivers) {
    return fail(ChannelError::PlanMismatch, "receiver " + std::to_string(receiver) + " of a plan of " +
                                                std::to_string(plan.receiverCount()) + ", ring " + ring.name() +
                                                " of " + std::to_string(geometry.maxReceivers));
  }
  auto stream = RegionStream::build(plan, source, geometry.bucketBytes);
  if (!stream) return tl::unexpected(stream.error());

  // Each delivery: its segment's position in the stream and its runs in the local tensor, checked against the bound
  // buffers before any byte moves.
  struct Taken {
    std::uint32_t position;
    std::byte* local;
    SegmentRuns runs;
  };
  const std::span<const Delivery> deliveries = plan.deliveries(source, receiver);
  std::vector<Taken> taken;
  taken.reserve(deliveries.size());
  for (const Delivery& delivery : deliveries) {
    const Segment& segment = plan.segments()[delivery.segment];
    const std::uint32_t local = plan.localOf(receiver, delivery);
    const std::uint32_t position = stream->positionOf(delivery.segment);
    if (position == stream->segmentCount() || (!taken.empty() && position < taken.back().position)) {
      return fail(ChannelError::PlanMismatch, pairName(source, receiver) + ": segment " +
                                                  std::to_string(delivery.segment) + " is not in the send order");
    }
    if (local >= locals.size()) {
      return fail(ChannelError::PlanMismatch, pairName(source, receiver) + ": local tensor " + std::to_string(local) +
                                                  " has no buffer (" + std::to_string(locals.size()) + " bound)");
    }
    SegmentRuns runs(plan.destinationRuns(receiver, delivery));
    if (runs.bytes() != segment.bytes || runs.end() > locals[local].size()) {
      return fail(ChannelError::PlanMismatch, pairName(source, receiver) + ": local tensor '" +
                                                  plan.bindings(receiver).locals[local].name + "' needs " +
                                                  std::to_string(runs.end()) + " bytes, the bound buffer has " +
                                                  std::to_string(locals[local].size()));
    }
    taken.push_back(Taken{position, locals[local].data(), std::move(runs)});
  }

  // A segment this receiver takes twice (bound into two places) is copied and digested once per delivery: the
  // deliveries of the segment being copied keep a digest each, `open`, from `openFirst` on.
  std::vector<Digest> digests(taken.size(), emptyDigest());
  std::vector<std::unique_ptr<StreamDigest>> open;
  std::size_t openFirst = 0;
  const auto close = [&] {
    for (std::size_t index = 0; index < open.size(); ++index) digests[openFirst + index] = open[index]->digest();
    open.clear();
  };
  const ReceiverSet mine = ReceiverSet{1} << receiver;
  const BucketPlan& buckets = stream->buckets();
  std::size_t next = 0;  // the first delivery whose segment may still come
  std::uint64_t took = 0;
  for (std::uint32_t bucket = 0; bucket < buckets.bucketCount(); ++bucket) {
    // The sender does not wait for a receiver to drain a bucket it takes nothing from, so it must not touch one.
    if ((stream->receiversOf(bucket) & mine) == 0) continue;
    auto filled = ring.awaitFilled(transfer, bucket, deadline, cancelled);
    if (!filled) return named(std::move(filled.error()), pairName(source, receiver));
    const std::byte* bytes = *filled;
    for (const Piece& piece : buckets.piecesOfBucket(bucket)) {
      while (next < taken.size() && taken[next].position < piece.tensor) ++next;
      std::size_t end = next;
      while (end < taken.size() && taken[end].position == piece.tensor) ++end;
      if (end == next) continue;  // a segment for other receivers
      if (open.empty() || openFirst != next) {
        close();
        openFirst = next;
        for (std::size_t index = next; index < end; ++index) open.push_back(std::make_unique<StreamDigest>());
      }
      for (std::size_t index = next; index < end; ++index) {
        std::byte* local = taken[index].local;
        StreamDigest& digest = *open[index - next];
        taken[index].runs.forEach(piece.tensorOffset, piece.bytes,
                                  [&](std::uint64_t offset, std::uint64_t at, std::uint64_t count) {
                                    unpackAndDigest(local + offset, bytes + piece.bucketOffset + at, count, digest);
                                  });
        took += piece.bytes;
      }
    }
    if (auto drained = ring.publishDrained(transfer, bucket, receiver); !drained) {
      return named(std::move(drained.error()), pairName(source, receiver));
    }
    if (progress) progress(took);
  }
  close();
  if (took != plan.bytes(source, receiver)) {
    return fail(ChannelError::PlanMismatch, pairName(source, receiver) + ": took " + std::to_string(took) + " of " +
                                                std::to_string(plan.bytes(source, receiver)) + " bytes");
  }

  PairDigest pair;
  for (std::size_t index = 0; index < taken.size(); ++index) {
    pair.add(plan.segments()[deliveries[index].segment].bytes, digests[index]);
  }
  return pair.result();
}

}  // namespace wsync::bus
