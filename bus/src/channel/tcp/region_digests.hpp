#pragma once
// The digests of a region round on the tcp channel (region_transfer.hpp, "PairDigest"): each side streams XXH3-128
// over a segment's bytes as they pass through its socket calls, while they are still in cache, and folds the
// segment digests of each (source, receiver) pair in send order. No side reads the model's memory a second time.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <tl/expected.hpp>

#include "channel/tcp/payload_stream.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus::tcp {

// A source's digests of its segments: each segment digested once however many receivers take it, by whichever
// receiver's send reaches its bytes first (every receiver's stream holds a segment's bytes in the same order).
class SegmentDigests {
 public:
  SegmentDigests(const RegionPlan& plan, std::uint32_t source);

  // `stream` (one receiver's) was sent from `from` up to `to`: digests what no other receiver's send reached first.
  void sent(const PayloadStream& stream, std::uint64_t from, std::uint64_t to);
  // Bytes of the source's segments digested so far: each segment's bytes counted once.
  std::uint64_t digested() const { return digested_; }
  // What the source sent each receiver (indexed by receiver); PlanMismatch when a segment was not sent whole.
  tl::expected<RegionTransferResult, ChannelFailure> results() const;

 private:
  std::uint32_t positionOf(std::uint32_t segment) const;

  const RegionPlan& plan_;
  const std::uint32_t source_;
  const std::span<const std::uint32_t> order_;       // the source's segments, increasing
  std::vector<std::uint64_t> done_;                  // [position]: bytes digested
  std::vector<Digest> digests_;                      // [position]: the digest, once done
  std::vector<std::unique_ptr<StreamDigest>> open_;  // [position]: while partly digested
  std::uint64_t digested_ = 0;
};

// A receiver's digests of what it read from one source, delivery by delivery, folded into the pair's digest.
class DeliveryDigests {
 public:
  // Digests `stream`'s bytes up to `position` (read so far), closing every delivery that ends there.
  void upTo(const PayloadStream& stream, std::uint64_t position);
  PairResult result() const { return pair_.result(); }

 private:
  PairDigest pair_;
  StreamCursor digested_;
  std::size_t next_ = 0;  // the delivery being digested
  std::uint64_t start_ = 0;
  std::optional<StreamDigest> current_;
};

}  // namespace wsync::bus::tcp
