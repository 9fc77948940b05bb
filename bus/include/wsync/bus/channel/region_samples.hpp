#pragma once
// The verification of region rounds on the GPU channels (docs/regions.md, "Digests on the sending side too"): a
// sample on cuda_ipc, every word on nccl (wordRuns), both in a segment's word space.
//
// On cuda_ipc a source's bytes are read once, by whoever copies them (a receiver's kernel reads the source's memory
// in place). A digest of every byte on the sending side would be a second pass over the model's
// memory: on one GPU half again the copy's traffic. So both sides fold the device checksum (device_checksum.hpp)
// over the same sample of every segment instead: a window of kSampleWindowWords words every kSampleStrideWords
// words of the segment's word space, from its first word on (a segment of up to a window is checked whole). The
// source reads the sample from its own buffers; the receiver reads it from its local tensors after its copy, so what
// is checked is what landed where the engine reads it: a receiver that copied from the wrong memory (another
// source's, a freed block, a stale export), to the wrong place or not at all fails with the pair's digests apart,
// at the cost of reading a 64th of the bytes once more on each side. On nccl both sides copy every byte anyway (the
// source's pack, the receiver's unpack), so they fold every word.
//
// A segment's word space: its bytes in row-major order, cut into rows (the box's last dimension), each row cut into
// 8-byte words and its last word zero-padded. Row r's word w has index r * wordsPerRow + w. Every layout of the
// segment (the source's buffer, each receiver's local tensor) holds each row contiguous, so both sides see the same
// words, whatever runs their buffers cut the segment into.
#include <cstdint>
#include <span>
#include <vector>

#include "wsync/bus/channel/device_checksum.hpp"
#include "wsync/bus/channel/region_plan.hpp"

namespace wsync::bus {

// A window is a copy kernel's work item of a good size (a block reads it in a few passes, where a 4 KiB one left
// most of a block idle and cost a launch of tens of thousands of them); a stride of 64 windows keeps the check a 64th.
inline constexpr std::uint64_t kSampleWindowWords = 8192;    // 64 KiB
inline constexpr std::uint64_t kSampleStrideWords = 524288;  // 4 MiB: a 64th of every segment

// A piece of a sample: `bytes` at `offset` of one buffer, whose first byte starts word `firstWord` of the segment's
// word space.
struct SampledRun {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t firstWord = 0;

  friend bool operator==(const SampledRun&, const SampledRun&) = default;
};

// The sampled words of `segment`, where a buffer holds its bytes as `runs` (sourceRuns, destinationRuns), as
// pieces of that buffer in the segment's byte order.
std::vector<SampledRun> sampledRuns(const RegionPlan& plan, const Segment& segment, std::span<const ByteRun> runs);

// Every word of `segment`, where a buffer holds its bytes as `runs`, as pieces of that buffer in the segment's byte
// order: the full check of a channel whose copies read every byte anyway (nccl packs and unpacks them).
std::vector<SampledRun> wordRuns(const RegionPlan& plan, const Segment& segment, std::span<const ByteRun> runs);
// Words in `segment`'s word space (its rows, each padded to whole words).
std::uint64_t segmentWords(const RegionPlan& plan, const Segment& segment);

// Bytes of one row of `segment` (its box's last extent, in elements of its tensor's dtype).
std::uint64_t segmentRowBytes(const RegionPlan& plan, const Segment& segment);

// Host reference: folds the sampled words of `segment` (index `segmentIndex` in the plan, which keys the checksum)
// from `buffer`, where its bytes lie as `runs`, into `sums`, as the GPU channels' kernels do.
void addSampledSums(DeviceChecksumSums& sums, const RegionPlan& plan, std::uint32_t segmentIndex,
                    std::span<const std::byte> buffer, std::span<const ByteRun> runs);
// The same over every word (wordRuns).
void addWordSums(DeviceChecksumSums& sums, const RegionPlan& plan, std::uint32_t segmentIndex,
                 std::span<const std::byte> buffer, std::span<const ByteRun> runs);

}  // namespace wsync::bus
