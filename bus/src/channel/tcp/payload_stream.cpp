#include "channel/tcp/payload_stream.hpp"

#include <algorithm>
#include <string>

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
      std::byte* data = tensors[piece.tensor].data() + piece.tensorOffset;
      // A tensor cut across buckets continues where it stopped: one run, one iovec.
      if (!stream.runs_.empty() && stream.runs_.back().data + stream.runs_.back().bytes == data) {
        stream.runs_.back().bytes += piece.bytes;
      } else {
        stream.runs_.push_back(Run{data, piece.bytes});
      }
      stream.totalBytes_ += piece.bytes;
    }
    stream.bucketEnds_.push_back(stream.totalBytes_);
  }
  return stream;
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
