#pragma once
// What a region transfer reports (docs/regions.md, "Verification"): each side's bytes and digest per peer, a
// source's entry r for what it sent receiver r, a receiver's entry s for what it took from source s. The
// coordinator commits a version only when every pair agrees.
//
// The host channels' pair digest (PairDigest) is XXH3-128 over the XXH3-128 digests of the pair's deliveries, in the
// source's send order, each with its position and bytes: a source hashes each segment's bytes once however many
// receivers share it, and a receiver hashes what it took as it copies. Both depend only on the plan and the bytes,
// never on how a channel cuts segments into buckets, and a receiver that plans alone (RegionPlan) folds the same.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <wsync/schemas/control_generated.h>

#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {

struct PairResult {
  std::uint64_t bytes = 0;
  Digest digest;

  friend bool operator==(const PairResult&, const PairResult&) = default;
};

// Indexed by receiver on a source, by source on a receiver.
using RegionTransferResult = std::vector<PairResult>;

// Folds the segments of one (source, receiver) pair into its digest, in send order.
class PairDigest {
 public:
  // The next delivery of the pair: its bytes and their digest.
  void add(std::uint64_t bytes, const Digest& digest);
  PairResult result() const { return PairResult{bytes_, stream_.digest()}; }

 private:
  StreamDigest stream_;
  std::uint64_t bytes_ = 0;
  std::uint64_t deliveries_ = 0;
};

// A receiver's digest over what it took from each source, in source order: what its Commit carries, and what it
// checks its staged bytes against before it applies them.
Digest receiverDigestOf(std::span<const PairResult> fromSources);
// A region round's version digest: over every source's holdings digest and what it sent each receiver, in source
// order. It names the committed version the way the trainer's digest names a version of one source.
Digest versionDigestOf(std::span<const Digest> holdings, std::span<const RegionTransferResult> sent);

// Why `buffers` cannot be source `source`'s held regions in `plan` (how many, how large), if they cannot: a channel
// checks before it reads them.
std::optional<ChannelFailure> checkSourceBuffers(const RegionPlan& plan, std::uint32_t source,
                                                 std::span<const std::span<const std::byte>> buffers);
// The same for receiver `receiver`'s local tensors.
std::optional<ChannelFailure> checkReceiverLocals(const RegionPlan& plan, std::uint32_t receiver,
                                                  std::span<const std::span<std::byte>> locals);

// UpdateDone's per-peer reports of a region round.
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<msg::PairDone>>> toMessage(
    flatbuffers::FlatBufferBuilder& fbb, const RegionTransferResult& pairs);
RegionTransferResult pairsFromMessage(const flatbuffers::Vector<flatbuffers::Offset<msg::PairDone>>* pairs);

}  // namespace wsync::bus
