#include "channel/tcp/payload_stream.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace wsync::bus::tcp {

tl::expected<PayloadStream, ChannelFailure> PayloadStream::forSending(
    const BucketPlan& plan, std::span<const std::span<const std::byte>> tensors) {
  // The runs are only ever read on this side (sendmsg and the digest); one type of run keeps one stream type.
  std::vector<std::span<std::byte>> writable;
  writable.reserve(tensors.size());
  for (const auto& tensor : tensors) writable.emplace_back(const_cast<std::byte*>(tensor.data()), tensor.size());
  return build(plan, writable);
}

tl::expected<PayloadStream, ChannelFailure> PayloadStream::forReceiving(const BucketPlan& plan,
                                                                        std::span<const std::span<std::byte>> tensors) {
  return build(plan, tensors);
}

tl::expected<PayloadStream, ChannelFailure> PayloadStream::build(const BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors) {
  PayloadStream stream;
  stream.bucketEnds_.reserve(plan.bucketCount());
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    for (const Piece& piece : plan.piecesOfBucket(bucket)) {
      if (piece.tensor >= tensors.size() || piece.tensorOffset + piece.bytes > tensors[piece.tensor].size()) {
        return fail(ChannelError::PlanMismatch,
                    "tensor " + std::to_string(piece.tensor) + " needs " +
                        std::to_string(piece.tensorOffset + piece.bytes) + " bytes, the bound buffer has " +
                        std::to_string(piece.tensor < tensors.size() ? tensors[piece.tensor].size() : 0));
      }
      // A tensor cut across buckets continues where it stopped: one run, one iovec.
      stream.append(tensors[piece.tensor].data() + piece.tensorOffset, piece.bytes);
    }
    stream.bucketEnds_.push_back(stream.totalBytes_);
  }
  return stream;
}

tl::expected<PayloadStream, ChannelFailure> PayloadStream::forRegionSource(
    const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver,
    std::span<const std::span<const std::byte>> buffers) {
  PayloadStream stream;
  for (const Delivery& delivery : plan.deliveries(source, receiver)) {
    const Segment& segment = plan.segments()[delivery.segment];
    const std::vector<ByteRun> runs = plan.sourceRuns(segment);
    for (const ByteRun& run : runs) {
      if (segment.held >= buffers.size() || run.offset + run.bytes > buffers[segment.held].size()) {
        return fail(ChannelError::PlanMismatch,
                    "source " + std::to_string(source) + "'s region " + std::to_string(segment.held) + " (of '" +
                        plan.tensors()[segment.tensor].name + "') needs " + std::to_string(run.offset + run.bytes) +
                        " bytes, the bound buffer has " +
                        std::to_string(segment.held < buffers.size() ? buffers[segment.held].size() : 0));
      }
      // Only ever read on this side (sendmsg and the digest), as forSending's.
      stream.append(const_cast<std::byte*>(buffers[segment.held].data()) + run.offset, run.bytes);
    }
    stream.endDelivery(delivery.segment);
  }
  if (stream.bucketEnds_.empty() || stream.bucketEnds_.back() != stream.totalBytes_) {
    stream.bucketEnds_.push_back(stream.totalBytes_);
  }
  return stream;
}

tl::expected<PayloadStream, ChannelFailure> PayloadStream::forRegionReceiver(
    const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals) {
  PayloadStream stream;
  for (const Delivery& delivery : plan.deliveries(source, receiver)) {
    const std::uint32_t local = plan.localOf(receiver, delivery);
    for (const ByteRun& run : plan.destinationRuns(receiver, delivery)) {
      if (local >= locals.size() || run.offset + run.bytes > locals[local].size()) {
        return fail(
            ChannelError::PlanMismatch,
            "receiver " + std::to_string(receiver) + "'s local tensor " +
                (local < plan.bindings(receiver).locals.size() ? "'" + plan.bindings(receiver).locals[local].name + "'"
                                                               : std::to_string(local)) +
                " needs " + std::to_string(run.offset + run.bytes) + " bytes, the bound buffer has " +
                std::to_string(local < locals.size() ? locals[local].size() : 0));
      }
      stream.append(locals[local].data() + run.offset, run.bytes);
    }
    stream.endDelivery(delivery.segment);
  }
  if (stream.bucketEnds_.empty() || stream.bucketEnds_.back() != stream.totalBytes_) {
    stream.bucketEnds_.push_back(stream.totalBytes_);
  }
  return stream;
}

void PayloadStream::append(std::byte* data, std::uint64_t bytes) {
  if (bytes == 0) return;
  if (!runs_.empty() && runs_.back().data + runs_.back().bytes == data) {
    runs_.back().bytes += bytes;
  } else {
    runs_.push_back(Run{data, bytes});
    runStarts_.push_back(totalBytes_);
  }
  totalBytes_ += bytes;
}

void PayloadStream::endDelivery(std::uint32_t segment) {
  deliveries_.push_back(DeliveryEnd{segment, totalBytes_});
  const std::uint64_t last = bucketEnds_.empty() ? 0 : bucketEnds_.back();
  if (totalBytes_ - last >= kRegionProgressBytes) bucketEnds_.push_back(totalBytes_);
}

StreamCursor PayloadStream::seek(std::uint64_t position) const {
  const auto after = std::upper_bound(runStarts_.begin(), runStarts_.end(), position);
  if (after == runStarts_.begin()) return StreamCursor{};
  const auto run = static_cast<std::size_t>(after - runStarts_.begin()) - 1;
  StreamCursor cursor{run, position - runStarts_[run], position};
  if (cursor.offset == runs_[run].bytes) cursor = StreamCursor{run + 1, 0, position};
  return cursor;
}

void PayloadStream::digestRange(std::uint64_t from, std::uint64_t to, StreamDigest& digest) const {
  StreamCursor cursor = seek(from);
  digestUpTo(cursor, to, digest);
}

std::size_t PayloadStream::gather(const StreamCursor& cursor, std::uint64_t maxBytes, std::span<iovec> iovecs) const {
  std::size_t filled = 0;
  std::size_t run = cursor.run;
  std::uint64_t offset = cursor.offset;
  while (maxBytes > 0 && filled < iovecs.size() && run < runs_.size()) {
    const std::uint64_t bytes = std::min(runs_[run].bytes - offset, maxBytes);
    iovecs[filled++] = iovec{runs_[run].data + offset, static_cast<std::size_t>(bytes)};
    maxBytes -= bytes;
    ++run;
    offset = 0;
  }
  return filled;
}

void PayloadStream::advance(StreamCursor& cursor, std::uint64_t bytes) const {
  cursor.position += bytes;
  while (bytes > 0 && cursor.run < runs_.size()) {
    const std::uint64_t step = std::min(runs_[cursor.run].bytes - cursor.offset, bytes);
    cursor.offset += step;
    bytes -= step;
    if (cursor.offset == runs_[cursor.run].bytes) {
      ++cursor.run;
      cursor.offset = 0;
    }
  }
}

void PayloadStream::digestUpTo(StreamCursor& digested, std::uint64_t position, StreamDigest& digest) const {
  while (digested.position < position && digested.run < runs_.size()) {
    const Run& run = runs_[digested.run];
    const std::uint64_t bytes = std::min(run.bytes - digested.offset, position - digested.position);
    digest.add(run.data + digested.offset, bytes);
    advance(digested, bytes);
  }
}

}  // namespace wsync::bus::tcp
