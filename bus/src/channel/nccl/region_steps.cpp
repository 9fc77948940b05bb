#include "wsync/bus/channel/nccl/region_steps.hpp"

#include <algorithm>

#include "wsync/bus/channel/region_samples.hpp"

namespace wsync::bus {
namespace {

constexpr std::uint64_t kWordBytes = 8;

std::uint64_t alignUp(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// The bytes a delivery of `segment` takes in its pair's stream: its word space, padded to the stream's alignment.
std::uint64_t deliveryStreamBytes(const RegionPlan& plan, const Segment& segment) {
  return alignUp(segmentWords(plan, segment) * kWordBytes, kPairStreamAlignment);
}

enum class Side : std::uint8_t { Source, Receiver };

// Every piece of the pair's stream on `side`, in stream order; `staged` is the piece's position in the stream.
std::vector<StagedPiece> streamPieces(const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver, Side side,
                                      std::uint64_t& streamBytes) {
  std::vector<StagedPiece> pieces;
  std::uint64_t start = 0;
  for (const Delivery& delivery : plan.deliveries(source, receiver)) {
    const Segment& segment = plan.segments()[delivery.segment];
    const bool sending = side == Side::Source;
    const std::vector<ByteRun> runs = sending ? plan.sourceRuns(segment) : plan.destinationRuns(receiver, delivery);
    const std::uint32_t buffer = sending ? segment.held : plan.localOf(receiver, delivery);
    for (const SampledRun& run : wordRuns(plan, segment, runs)) {
      pieces.push_back(StagedPiece{.buffer = buffer,
                                   .segment = delivery.segment,
                                   .offset = run.offset,
                                   .staged = start + run.firstWord * kWordBytes,
                                   .bytes = run.bytes,
                                   .firstWord = run.firstWord});
    }
    start += deliveryStreamBytes(plan, segment);
  }
  streamBytes = start;
  return pieces;
}

// A chunk of a pair's stream before it has a place in a step: its pieces, staged from the chunk's start.
struct PairChunk {
  std::uint64_t wireBytes = 0;
  std::uint64_t payload = 0;
  std::vector<StagedPiece> pieces;
};

// The stream cut into chunks of `chunkBytes`: a piece across a cut is split there (on a word: cuts are multiples of
// kPairStreamAlignment, pieces start on words).
std::vector<PairChunk> cutIntoChunks(std::span<const StagedPiece> pieces, std::uint64_t streamBytes,
                                     std::uint64_t chunkBytes) {
  std::vector<PairChunk> chunks((streamBytes + chunkBytes - 1) / chunkBytes);
  for (std::size_t index = 0; index < chunks.size(); ++index) {
    chunks[index].wireBytes = std::min(chunkBytes, streamBytes - index * chunkBytes);
  }
  for (const StagedPiece& piece : pieces) {
    std::uint64_t at = piece.staged;
    const std::uint64_t end = piece.staged + piece.bytes;
    while (at < end) {
      const std::uint64_t chunk = at / chunkBytes;
      const std::uint64_t cut = std::min(end, (chunk + 1) * chunkBytes);
      const std::uint64_t into = at - piece.staged;  // a multiple of 8 (see above)
      StagedPiece part = piece;
      part.offset += into;
      part.staged = at - chunk * chunkBytes;
      part.bytes = cut - at;
      part.firstWord += into / kWordBytes;
      chunks[chunk].payload += part.bytes;
      chunks[chunk].pieces.push_back(part);
      at = cut;
    }
  }
  return chunks;
}

// Lays out the pairs' chunks step by step: step k holds chunk k of every pair that has one, in peer order.
void layOutSteps(std::span<const std::uint32_t> peers, const std::vector<std::vector<PairChunk>>& pairs,
                 std::vector<RegionStep>& steps, std::vector<StepChunk>& chunks, std::vector<StagedPiece>& pieces) {
  std::size_t stepCount = 0;
  for (const auto& pair : pairs) stepCount = std::max(stepCount, pair.size());
  for (std::size_t step = 0; step < stepCount; ++step) {
    RegionStep laid{.firstChunk = static_cast<std::uint32_t>(chunks.size())};
    for (std::size_t pair = 0; pair < pairs.size(); ++pair) {
      if (step >= pairs[pair].size()) continue;
      const PairChunk& chunk = pairs[pair][step];
      chunks.push_back(StepChunk{.peer = peers[pair],
                                 .staged = laid.stagedBytes,
                                 .wireBytes = chunk.wireBytes,
                                 .payload = chunk.payload,
                                 .firstPiece = static_cast<std::uint32_t>(pieces.size()),
                                 .pieceCount = static_cast<std::uint32_t>(chunk.pieces.size())});
      pieces.insert(pieces.end(), chunk.pieces.begin(), chunk.pieces.end());
      laid.stagedBytes += chunk.wireBytes;
      ++laid.chunkCount;
    }
    steps.push_back(laid);
  }
}

}  // namespace

std::uint64_t regionChunkBytes(const RegionPlan& plan, std::uint64_t stepBytes) {
  std::uint32_t mostPeers = 1;
  for (std::uint32_t source = 0; source < plan.sourceCount(); ++source) {
    std::uint32_t peers = 0;
    for (std::uint32_t receiver = 0; receiver < plan.receiverCount(); ++receiver) {
      peers += plan.bytes(source, receiver) > 0 ? 1U : 0U;
    }
    mostPeers = std::max(mostPeers, peers);
  }
  for (std::uint32_t receiver = 0; receiver < plan.receiverCount(); ++receiver) {
    std::uint32_t peers = 0;
    for (std::uint32_t source = 0; source < plan.sourceCount(); ++source) {
      peers += plan.bytes(source, receiver) > 0 ? 1U : 0U;
    }
    mostPeers = std::max(mostPeers, peers);
  }
  const std::uint64_t share = stepBytes / mostPeers / kPairStreamAlignment * kPairStreamAlignment;
  return std::max(share, kPairStreamAlignment);
}

std::uint64_t pairStreamBytes(const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver) {
  std::uint64_t bytes = 0;
  for (const Delivery& delivery : plan.deliveries(source, receiver)) {
    bytes += deliveryStreamBytes(plan, plan.segments()[delivery.segment]);
  }
  return bytes;
}

RegionSteps RegionSteps::forSource(const RegionPlan& plan, std::uint32_t source, std::uint64_t stepBytes) {
  return of(plan, source, true, stepBytes);
}

RegionSteps RegionSteps::forReceiver(const RegionPlan& plan, std::uint32_t receiver, std::uint64_t stepBytes) {
  return of(plan, receiver, false, stepBytes);
}

RegionSteps RegionSteps::of(const RegionPlan& plan, std::uint32_t self, bool sending, std::uint64_t stepBytes) {
  RegionSteps steps;
  steps.chunkBytes_ = regionChunkBytes(plan, stepBytes);
  std::vector<std::vector<PairChunk>> pairs;
  const std::uint32_t peerCount = sending ? plan.receiverCount() : plan.sourceCount();
  for (std::uint32_t peer = 0; peer < peerCount; ++peer) {
    const std::uint32_t source = sending ? self : peer;
    const std::uint32_t receiver = sending ? peer : self;
    if (plan.bytes(source, receiver) == 0) continue;
    std::uint64_t streamBytes = 0;
    const auto pieces = streamPieces(plan, source, receiver, sending ? Side::Source : Side::Receiver, streamBytes);
    steps.peers_.push_back(peer);
    pairs.push_back(cutIntoChunks(pieces, streamBytes, steps.chunkBytes_));
  }
  layOutSteps(steps.peers_, pairs, steps.steps_, steps.chunks_, steps.pieces_);
  return steps;
}

std::uint64_t RegionSteps::maxStagedBytes() const {
  std::uint64_t most = 0;
  for (const RegionStep& step : steps_) most = std::max(most, step.stagedBytes);
  return most;
}

}  // namespace wsync::bus
