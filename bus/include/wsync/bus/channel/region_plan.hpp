#pragma once
// Which bytes move from which source to which receiver in a round of sharded sources and sliced receivers
// (docs/regions.md). A pure function of the manifest, every source's holdings and every receiver's bindings, so
// that the coordinator and every agent compute the same plan from what they all have, and the round's messages
// carry digests of the declarations instead of the plan.
//
// A *segment* is a box of one tensor that one source reads once: the common part of a region the source holds and
// a region a receiver binds, sent to every receiver that takes exactly that box from that source (data-parallel
// engines binding the whole tensor share one). Each source sends its segments in plan order (manifest order, then
// by box), each receiver takes those addressed to it; a segment's bytes are the box's elements in row-major order,
// on the wire and in the digests alike. Where sources hold equal regions (replicas), each of a receiver's parts
// goes to the holder that sends that receiver the fewest bytes so far. So what a receiver takes from whom depends
// only on the holdings and its own bindings: a receiver plans with its own bindings alone (a plan of one receiver)
// and gets the deliveries a source computes for it with everyone's.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/region.hpp"

namespace wsync::bus {

// One receiver of a segment: receiver `receiver`'s bound region `bound` (an index into its bindings' regions).
struct SegmentTarget {
  std::uint32_t receiver = 0;
  std::uint32_t bound = 0;
};

struct Segment {
  std::uint32_t source = 0;
  std::uint32_t held = 0;  // the region of the source's holdings it is read from (its buffer's index)
  std::uint32_t tensor = 0;
  std::uint64_t bytes = 0;
  std::uint32_t firstTarget = 0;  // into RegionPlan::targets()
  std::uint32_t targetCount = 0;
};

// Segment `segment` as receiver r takes it from source s: in s's send order, and to be placed by bound region
// `bound` of r.
struct Delivery {
  std::uint32_t segment = 0;
  std::uint32_t bound = 0;
};

// A contiguous byte run of a box inside a dense row-major buffer: `bytes` at `offset` of the buffer.
struct ByteRun {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;

  friend bool operator==(const ByteRun&, const ByteRun&) = default;
};

// A copy of `bytes` from `source` offset of one buffer to `destination` offset of another.
struct CopyRun {
  std::uint64_t source = 0;
  std::uint64_t destination = 0;
  std::uint64_t bytes = 0;

  friend bool operator==(const CopyRun&, const CopyRun&) = default;
};

class RegionPlan {
 public:
  // Checks every declaration (checkHoldings, checkCoverage, checkBindings) and computes the plan. `sourceNames` and
  // `receiverNames` (one per source and receiver) name them in refusals.
  static tl::expected<RegionPlan, RegionFailure> build(const Manifest& manifest, std::vector<SourceHoldings> sources,
                                                       std::vector<ReceiverBindings> receivers,
                                                       std::span<const std::string> sourceNames,
                                                       std::span<const std::string> receiverNames);

  // XXH3-128 of the manifest's digest and every declaration's (digestOf): equal digests mean equal plans, so that a
  // channel keeps what it derived from a plan (its copy tables) across rounds.
  const Digest& digest() const { return digest_; }
  std::uint32_t sourceCount() const { return static_cast<std::uint32_t>(sources_.size()); }
  std::uint32_t receiverCount() const { return static_cast<std::uint32_t>(receivers_.size()); }
  const SourceHoldings& holdings(std::uint32_t source) const { return sources_[source]; }
  const ReceiverBindings& bindings(std::uint32_t receiver) const { return receivers_[receiver]; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }

  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<SegmentTarget>& targets() const { return targets_; }
  std::span<const SegmentTarget> targetsOf(const Segment& segment) const {
    return std::span(targets_).subspan(segment.firstTarget, segment.targetCount);
  }
  // The segments source s sends, in its send order (indices into segments()).
  std::span<const std::uint32_t> segmentsOf(std::uint32_t source) const;
  // What receiver r takes from source s, in s's send order.
  std::span<const Delivery> deliveries(std::uint32_t source, std::uint32_t receiver) const;
  std::uint64_t bytes(std::uint32_t source, std::uint32_t receiver) const {
    return pairBytes_[source * receivers_.size() + receiver];
  }
  // Bytes source s reads (each segment once) and sends (once per target).
  std::uint64_t bytesRead(std::uint32_t source) const { return sourceRead_[source]; }
  std::uint64_t bytesSent(std::uint32_t source) const;
  std::uint64_t bytesReceived(std::uint32_t receiver) const;

  // The segment's box, in the tensor's coordinates.
  Box boxOf(const Segment& segment) const;
  // Where the segment's bytes are in the source's buffer of region `segment.held`, in the segment's byte order.
  std::vector<ByteRun> sourceRuns(const Segment& segment) const;
  // Where they go in receiver r's local tensor of `delivery.bound`'s region, in the same order.
  std::vector<ByteRun> destinationRuns(std::uint32_t receiver, const Delivery& delivery) const;
  // Both at once: the copies from the source's buffer to the receiver's local tensor.
  std::vector<CopyRun> copyRuns(std::uint32_t receiver, const Delivery& delivery) const;
  // The local tensor a delivery fills.
  std::uint32_t localOf(std::uint32_t receiver, const Delivery& delivery) const {
    return receivers_[receiver].regions[delivery.bound].local;
  }

 private:
  RegionPlan() = default;

  std::size_t elementBytesOf(std::uint32_t tensor) const;

  std::vector<TensorSpec> tensors_;  // the manifest's, for shapes and dtypes
  std::vector<SourceHoldings> sources_;
  std::vector<ReceiverBindings> receivers_;
  std::vector<std::vector<std::uint32_t>> boundTensors_;  // [receiver][bound region]: its tensor's manifest index
  std::vector<Segment> segments_;
  std::vector<SegmentTarget> targets_;
  std::vector<std::uint32_t> sendOrder_;    // segment indices, source by source
  std::vector<std::uint32_t> sourceFirst_;  // into sendOrder_, one past the end at [sourceCount]
  std::vector<Delivery> deliveries_;        // pair by pair (source-major), each in send order
  std::vector<std::uint32_t> pairFirst_;    // into deliveries_, one past the end at [pairs]
  std::vector<std::uint64_t> pairBytes_;    // [source * receiverCount + receiver]
  std::vector<std::uint64_t> sourceRead_;
  Digest digest_;
};

// The contiguous runs of box `part` inside a dense row-major buffer of `shape` (elements of `elementBytes`), in the
// box's row-major order; runs that follow each other in the buffer are merged.
std::vector<ByteRun> runsOf(std::span<const std::int64_t> shape, const Box& part, std::size_t elementBytes);
// Two run lists of the same bytes in the same order, as copies from the first's buffer to the second's.
std::vector<CopyRun> pairRuns(std::span<const ByteRun> from, std::span<const ByteRun> to);

}  // namespace wsync::bus
