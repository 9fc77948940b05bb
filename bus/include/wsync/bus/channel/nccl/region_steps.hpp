#pragma once
// How a region round moves on the nccl channel (docs/gpu-channels.md, "Region rounds on nccl"). A pure function of
// the region plan, one rank's side and the staging budget, so that both ends of every pair issue sends and receives
// of the same sizes in the same order.
//
// A pair's stream: what receiver r takes from source s (RegionPlan::deliveries), delivery after delivery, each laid
// out in its segment's word space (region_samples.hpp: its rows, each padded to whole 8-byte words; a row of whole
// words, as nearly every model has, is its bytes unchanged) from a multiple of kPairStreamAlignment. The stream is
// cut into chunks of chunkBytes, so a chunk's cuts fall on words, and a piece cut at a chunk's edge keeps starting on
// a word of its segment (the checksum's unit).
//
// A step: chunk k of every pair of this rank that has one, one after the other in peer order in a staging buffer,
// moved in one NCCL group (ncclSend on a source, ncclRecv on a receiver). Every rank takes its steps in order, so step
// k of a rank waits only on step k of its peers, whatever the pattern: no deadlock, however many sources and
// receivers. chunkBytes is the staging budget over the most peers any rank has, so that no rank stages more than the
// budget in one step.
#include <cstdint>
#include <span>
#include <vector>

#include "wsync/bus/channel/region_plan.hpp"

namespace wsync::bus {

// Deliveries start at a multiple of this in their pair's stream: the staged copies stay 16-byte aligned.
inline constexpr std::uint64_t kPairStreamAlignment = 16;

// A piece of a chunk: `bytes` at `offset` of this side's buffer `buffer` (a source's held region, a receiver's local
// tensor) and at `staged` from the chunk's start, whose first byte is word `firstWord` of segment `segment`.
struct StagedPiece {
  std::uint32_t buffer = 0;
  std::uint32_t segment = 0;
  std::uint64_t offset = 0;
  std::uint64_t staged = 0;
  std::uint64_t bytes = 0;
  std::uint64_t firstWord = 0;

  friend bool operator==(const StagedPiece&, const StagedPiece&) = default;
};

// One send or receive of a step: `wireBytes` to or from `peer` (a receiver's index on a source, a source's on a
// receiver), at `staged` from the step's start; `payload` of them are the tensors' (the rest is padding).
struct StepChunk {
  std::uint32_t peer = 0;
  std::uint64_t staged = 0;
  std::uint64_t wireBytes = 0;
  std::uint64_t payload = 0;
  std::uint32_t firstPiece = 0;
  std::uint32_t pieceCount = 0;
};

struct RegionStep {
  std::uint32_t firstChunk = 0;
  std::uint32_t chunkCount = 0;
  std::uint64_t stagedBytes = 0;
};

class RegionSteps {
 public:
  // Source `source`'s steps, with a step staging at most `stepBytes` (rounded down to whole chunks).
  static RegionSteps forSource(const RegionPlan& plan, std::uint32_t source, std::uint64_t stepBytes);
  // Receiver `receiver`'s, with the same `stepBytes` as every source's.
  static RegionSteps forReceiver(const RegionPlan& plan, std::uint32_t receiver, std::uint64_t stepBytes);

  std::uint64_t chunkBytes() const { return chunkBytes_; }
  const std::vector<RegionStep>& steps() const { return steps_; }
  std::span<const StepChunk> chunksOf(const RegionStep& step) const {
    return std::span(chunks_).subspan(step.firstChunk, step.chunkCount);
  }
  std::span<const StagedPiece> piecesOf(const StepChunk& chunk) const {
    return std::span(pieces_).subspan(chunk.firstPiece, chunk.pieceCount);
  }
  // The largest step's staging.
  std::uint64_t maxStagedBytes() const;
  // The peers this side moves bytes with, in index order.
  const std::vector<std::uint32_t>& peers() const { return peers_; }

 private:
  RegionSteps() = default;
  // `self` a source (`sending`) or a receiver.
  static RegionSteps of(const RegionPlan& plan, std::uint32_t self, bool sending, std::uint64_t stepBytes);

  std::uint64_t chunkBytes_ = 0;
  std::vector<std::uint32_t> peers_;
  std::vector<RegionStep> steps_;
  std::vector<StepChunk> chunks_;
  std::vector<StagedPiece> pieces_;
};

// The chunk size every rank of `plan` uses: `stepBytes` over the most peers one rank has, a multiple of
// kPairStreamAlignment.
std::uint64_t regionChunkBytes(const RegionPlan& plan, std::uint64_t stepBytes);
// The bytes of the stream of source `source` to receiver `receiver`, padding included.
std::uint64_t pairStreamBytes(const RegionPlan& plan, std::uint32_t source, std::uint32_t receiver);

}  // namespace wsync::bus
