#pragma once
// The bytes one tcp transfer moves, as one stream: every piece of the bucket plan in order, which is the tensors'
// bytes in manifest order without the buckets' alignment padding, as runs of contiguous memory in the caller's
// tensors. The sender writes from them and the receiver reads into them: neither side has a bucket buffer, and the
// bucket plan only decides where progress is reported.
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus::tcp {

// iovecs per sendmsg or readv: enough that a chunk of small tensors (norms and biases of a few KiB) goes in one call.
inline constexpr std::size_t kMaxIovecs = 64;

// A position in a stream: the run it is in, the offset in that run, and the bytes before it.
struct StreamCursor {
  std::size_t run = 0;
  std::uint64_t offset = 0;
  std::uint64_t position = 0;
};

class PayloadStream {
 public:
  // Both check every piece against the tensors bound for it before any byte moves (PlanMismatch): no plan, however
  // wrong, makes a side read or write outside them.
  static tl::expected<PayloadStream, ChannelFailure> forSending(const BucketPlan& plan,
                                                                std::span<const std::span<const std::byte>> tensors);
  static tl::expected<PayloadStream, ChannelFailure> forReceiving(const BucketPlan& plan,
                                                                  std::span<const std::span<std::byte>> tensors);

  std::uint64_t totalBytes() const { return totalBytes_; }
  // The next at most `maxBytes` bytes from `cursor`, as at most iovecs.size() iovecs; how many were filled (0 at the
  // end). A sender's iovecs point into const tensors: sendmsg only reads them.
  std::size_t gather(const StreamCursor& cursor, std::uint64_t maxBytes, std::span<iovec> iovecs) const;
  void advance(StreamCursor& cursor, std::uint64_t bytes) const;
  // Adds the bytes from `digested` up to `position` to `digest` and moves `digested` there.
  void digestUpTo(StreamCursor& digested, std::uint64_t position, StreamDigest& digest) const;
  // Where each bucket's bytes end in the stream, in bucket order.
  const std::vector<std::uint64_t>& bucketEnds() const { return bucketEnds_; }

 private:
  struct Run {
    std::byte* data;
    std::uint64_t bytes;
  };

  static tl::expected<PayloadStream, ChannelFailure> build(const BucketPlan& plan,
                                                           std::span<const std::span<std::byte>> tensors);

  std::vector<Run> runs_;
  std::vector<std::uint64_t> bucketEnds_;
  std::uint64_t totalBytes_ = 0;
};

}  // namespace wsync::bus::tcp
