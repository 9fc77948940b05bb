#include "wsync/bus/channel/region_samples.hpp"

#include <algorithm>
#include <cstring>

#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::bus {
namespace {

constexpr std::uint64_t kWordBytes = 8;

// A sampled range of the segment's byte stream, [begin, end), whose first byte is word `firstWord`.
struct StreamRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t firstWord = 0;
};

std::uint64_t wordsPerRow(std::uint64_t rowBytes) { return (rowBytes + kWordBytes - 1) / kWordBytes; }

// The ranges of windows of `windowWords` every `strideWords` of a segment of `totalBytes` in rows of `rowBytes`, in
// order. Where rows are whole words the word space is the byte stream itself and a window is one range; else a
// window is cut at every row's end (its last word padded), into a range a row.
std::vector<StreamRange> windowRanges(std::uint64_t totalBytes, std::uint64_t rowBytes, std::uint64_t windowWords,
                                      std::uint64_t strideWords) {
  std::vector<StreamRange> ranges;
  if (totalBytes == 0 || rowBytes == 0) return ranges;
  const std::uint64_t rows = totalBytes / rowBytes;
  const std::uint64_t perRow = wordsPerRow(rowBytes);
  const std::uint64_t words = rows * perRow;
  for (std::uint64_t window = 0; window < words; window += strideWords) {
    const std::uint64_t last = std::min(window + windowWords, words);
    if (rowBytes % kWordBytes == 0) {
      ranges.push_back({window * kWordBytes, last * kWordBytes, window});
      continue;
    }
    for (std::uint64_t word = window; word < last;) {
      const std::uint64_t row = word / perRow;
      const std::uint64_t inRow = word - row * perRow;
      const std::uint64_t rowEnd = std::min(last, (row + 1) * perRow);
      const std::uint64_t begin = row * rowBytes + inRow * kWordBytes;
      const std::uint64_t end = row * rowBytes + std::min(rowBytes, (rowEnd - row * perRow) * kWordBytes);
      ranges.push_back({begin, end, word});
      word = rowEnd;
    }
  }
  return ranges;
}

// Each range through the runs that hold it: runs hold whole rows, so a range is cut only where a row ends, and every
// piece starts on a word.
std::vector<SampledRun> runsThrough(std::span<const StreamRange> ranges, std::span<const ByteRun> runs) {
  std::vector<SampledRun> out;
  std::size_t run = 0;
  std::uint64_t runStart = 0;  // stream position of runs[run]
  for (const StreamRange& range : ranges) {
    std::uint64_t at = range.begin;
    while (at < range.end && run < runs.size()) {
      if (at >= runStart + runs[run].bytes) {
        runStart += runs[run].bytes;
        ++run;
        continue;
      }
      const std::uint64_t end = std::min(range.end, runStart + runs[run].bytes);
      const std::uint64_t intoRange = at - range.begin;
      out.push_back({runs[run].offset + (at - runStart), end - at, range.firstWord + intoRange / kWordBytes});
      at = end;
    }
  }
  return out;
}

// Folds the words of `pieces` of `buffer` into `sums`, as the GPU channels' kernels do.
void addPieceSums(DeviceChecksumSums& sums, std::uint32_t segmentIndex, std::span<const std::byte> buffer,
                  std::span<const SampledRun> pieces) {
  for (const SampledRun& piece : pieces) {
    for (std::uint64_t at = 0; at < piece.bytes; at += kWordBytes) {
      std::uint64_t value = 0;
      std::memcpy(&value, buffer.data() + piece.offset + at, std::min(kWordBytes, piece.bytes - at));
      addDeviceChecksumWord(sums, segmentIndex, piece.firstWord + at / kWordBytes, value);
    }
  }
}

}  // namespace

std::uint64_t segmentRowBytes(const RegionPlan& plan, const Segment& segment) {
  const Box box = plan.boxOf(segment);
  const std::uint64_t element = elementBytes(plan.tensors()[segment.tensor].dtype);
  return box.extent.empty() ? element : static_cast<std::uint64_t>(box.extent.back()) * element;
}

std::vector<SampledRun> sampledRuns(const RegionPlan& plan, const Segment& segment, std::span<const ByteRun> runs) {
  return runsThrough(
      windowRanges(segment.bytes, segmentRowBytes(plan, segment), kSampleWindowWords, kSampleStrideWords), runs);
}

std::uint64_t segmentWords(const RegionPlan& plan, const Segment& segment) {
  const std::uint64_t rowBytes = segmentRowBytes(plan, segment);
  return rowBytes == 0 ? 0 : segment.bytes / rowBytes * wordsPerRow(rowBytes);
}

std::vector<SampledRun> wordRuns(const RegionPlan& plan, const Segment& segment, std::span<const ByteRun> runs) {
  const std::uint64_t words = segmentWords(plan, segment);
  if (words == 0) return {};
  return runsThrough(windowRanges(segment.bytes, segmentRowBytes(plan, segment), words, words), runs);
}

void addSampledSums(DeviceChecksumSums& sums, const RegionPlan& plan, std::uint32_t segmentIndex,
                    std::span<const std::byte> buffer, std::span<const ByteRun> runs) {
  addPieceSums(sums, segmentIndex, buffer, sampledRuns(plan, plan.segments()[segmentIndex], runs));
}

void addWordSums(DeviceChecksumSums& sums, const RegionPlan& plan, std::uint32_t segmentIndex,
                 std::span<const std::byte> buffer, std::span<const ByteRun> runs) {
  addPieceSums(sums, segmentIndex, buffer, wordRuns(plan, plan.segments()[segmentIndex], runs));
}

}  // namespace wsync::bus
