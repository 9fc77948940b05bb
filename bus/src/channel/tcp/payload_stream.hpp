#pragma once
// The bytes one tcp connection moves, as one stream of runs of contiguous memory in the caller's tensors. In a round
// of one sender: every piece of the bucket plan in order, which is the tensors' bytes in manifest order without the
// buckets' alignment padding, the bucket plan deciding only where progress is reported. In a region round
// (docs/regions.md): the segments one receiver takes from one source, in the source's send order, each a box's
// elements in row-major order (RegionPlan's runs in the source's buffers, or in the receiver's local tensors). The
// sender writes from them and the receiver reads into them: neither side has a bucket buffer.
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus::tcp {

// iovecs per sendmsg or readv: enough that a chunk of small tensors (norms and biases of a few KiB) goes in one call.
inline constexpr std::size_t kMaxIovecs = 64;

// A region stream reports progress at the end of a delivery at least this many bytes past the last report: the host
// channels' buckets are of this order, and a stream of 100,000 small segments must not call back 100,000 times.
inline constexpr std::uint64_t kRegionProgressBytes = std::uint64_t{16} << 20;

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
  // A region round's stream from `source` to `receiver`: on the source, from its buffers (indexed like its holdings'
  // regions); on the receiver, into its local tensors (indexed like its bindings' locals). Both check every run
  // against the buffer it is in before any byte moves.
  static tl::expected<PayloadStream, ChannelFailure> forRegionSource(
      const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver,
      std::span<const std::span<const std::byte>> buffers);
  static tl::expected<PayloadStream, ChannelFailure> forRegionReceiver(const RegionPlan& plan, std::uint32_t source,
                                                                       std::uint32_t receiver,
                                                                       std::span<const std::span<std::byte>> locals);

  std::uint64_t totalBytes() const { return totalBytes_; }
  // The next at most `maxBytes` bytes from `cursor`, as at most iovecs.size() iovecs; how many were filled (0 at the
  // end). A sender's iovecs point into const tensors: sendmsg only reads them.
  std::size_t gather(const StreamCursor& cursor, std::uint64_t maxBytes, std::span<iovec> iovecs) const;
  void advance(StreamCursor& cursor, std::uint64_t bytes) const;
  // Adds the bytes from `digested` up to `position` to `digest` and moves `digested` there.
  void digestUpTo(StreamCursor& digested, std::uint64_t position, StreamDigest& digest) const;
  // Adds the stream's bytes [from, to) to `digest`.
  void digestRange(std::uint64_t from, std::uint64_t to, StreamDigest& digest) const;
  // Where progress is reported, in order: each bucket's end (a round of one sender), or delivery ends about
  // kRegionProgressBytes apart and the stream's end (a region stream).
  const std::vector<std::uint64_t>& bucketEnds() const { return bucketEnds_; }

  // A region stream's deliveries, in order: the plan's segment and where its bytes end in the stream (empty in a
  // round of one sender).
  struct DeliveryEnd {
    std::uint32_t segment = 0;
    std::uint64_t end = 0;
  };
  const std::vector<DeliveryEnd>& deliveries() const { return deliveries_; }

 private:
  struct Run {
    std::byte* data;
    std::uint64_t bytes;
  };

  static tl::expected<PayloadStream, ChannelFailure> build(const BucketPlan& plan,
                                                           std::span<const std::span<std::byte>> tensors);
  // Appends `bytes` at `data`, continuing the last run where it ends there.
  void append(std::byte* data, std::uint64_t bytes);
  // Ends a region stream's delivery of `segment` here, and a progress step when it is far enough past the last.
  void endDelivery(std::uint32_t segment);
  // The cursor at `position`.
  StreamCursor seek(std::uint64_t position) const;

  std::vector<Run> runs_;
  std::vector<std::uint64_t> runStarts_;  // [run]: the bytes before it
  std::vector<std::uint64_t> bucketEnds_;
  std::vector<DeliveryEnd> deliveries_;
  std::uint64_t totalBytes_ = 0;
};

}  // namespace wsync::bus::tcp
