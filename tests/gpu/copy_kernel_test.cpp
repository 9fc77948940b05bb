// The copy kernel every GPU channel moves bytes with (bus/src/channel/gpu/copy_kernel.cu), on its own: one batch of
// runs at every pair of source and destination offsets from a 16-byte boundary (0..15 each), of lengths that end
// anywhere in a word, a vector and a 128 KiB chunk, so that each path runs (16-byte vectors, shifted vectors, words
// in 8/4/2-byte parts, bytes) with the words no path covers. Every run must arrive byte for byte, nothing around a
// run may be written, and the folded sums must equal the host reference, whatever the grid; through CopyTable as the
// channels build batches, and through CopyReporter as the cuda_ipc receiver learns its copy's end.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "channel/gpu/copy_reporter.hpp"
#include "channel/gpu/copy_table.hpp"
#include "gpu_peers.hpp"
#include "wsync/bus/channel/device_checksum.hpp"

namespace wsync::test {
namespace {

using bus::DeviceChecksumSums;
using bus::gpu::detail::CopyReport;
using bus::gpu::detail::CopyReporter;
using bus::gpu::detail::CopyTable;
using bus::gpu::detail::kCopyChunkBytes;
using bus::gpu::detail::kWarpChunkBytes;

// What the destination holds where no run writes: any byte the kernel stores out of place shows.
constexpr unsigned char kUntouched = 0xA5;
// Bytes left between runs on both sides, so that a store past a run's end lands on a guard, not the next run.
constexpr std::uint64_t kGuardBytes = 48;
constexpr auto kReportWait = std::chrono::seconds(30);

// Lengths ending at every kind of place: inside the first word, on a word, inside a vector, past several rounds of
// a warp's vectors (runs shorter than kWarpChunkBytes are a warp's), either side of a warp's longest run, past
// several rounds of the block's vectors, and past a chunk; short and long runs interleaved in one batch.
constexpr std::uint64_t kShortLengths[] = {
    1, 3, 8, 13, 16, 24, 31, 100, 517, 4100, 20'011, kWarpChunkBytes - 3, kWarpChunkBytes, 40'003};
constexpr std::uint64_t kChunkLengths[] = {kCopyChunkBytes + 5, 3 * kCopyChunkBytes + 12};
constexpr std::uint64_t kChunkOffsets[] = {0, 3, 4, 8, 12};

struct LaidRun {
  std::uint64_t srcOffset = 0;  // in the source buffer
  std::uint64_t dstOffset = 0;  // in the destination buffer
  std::uint64_t bytes = 0;
  std::uint32_t tensor = 0;
  std::uint64_t tensorOffset = 0;  // where in its tensor the run starts (a multiple of 8)
};

struct Layout {
  std::vector<LaidRun> runs;
  std::uint64_t srcBytes = 0;
  std::uint64_t dstBytes = 0;

  void add(std::uint64_t srcMisalign, std::uint64_t dstMisalign, std::uint64_t bytes) {
    const auto tensor = static_cast<std::uint32_t>(runs.size());
    const std::uint64_t srcOffset = (srcBytes + kGuardBytes + 15) / 16 * 16 + srcMisalign;
    const std::uint64_t dstOffset = (dstBytes + kGuardBytes + 15) / 16 * 16 + dstMisalign;
    // Some runs are a tensor's later part (as a bucket's piece of a tensor larger than a bucket): the checksum's
    // word indices then start past 0.
    const std::uint64_t tensorOffset = 8 * 1031 * (tensor % 3);
    runs.push_back(LaidRun{srcOffset, dstOffset, bytes, tensor, tensorOffset});
    srcBytes = srcOffset + bytes;
    dstBytes = dstOffset + bytes;
  }
};

Layout everyAlignment() {
  Layout layout;
  for (std::uint64_t src = 0; src < 16; ++src) {
    for (std::uint64_t dst = 0; dst < 16; ++dst) {
      for (const std::uint64_t bytes : kShortLengths) layout.add(src, dst, bytes);
    }
  }
  for (const std::uint64_t src : kChunkOffsets) {
    for (const std::uint64_t dst : kChunkOffsets) {
      for (const std::uint64_t bytes : kChunkLengths) layout.add(src, dst, bytes);
    }
  }
  layout.srcBytes += kGuardBytes;
  layout.dstBytes += kGuardBytes;
  return layout;
}

// The device checksum's sums of the runs as the host computes them: each run's words little-endian, the last one
// zero-padded, at word indices from the run's place in its tensor.
DeviceChecksumSums hostSums(const Layout& layout, const std::vector<unsigned char>& source) {
  DeviceChecksumSums sums;
  for (const LaidRun& run : layout.runs) {
    for (std::uint64_t at = 0; at < run.bytes; at += 8) {
      std::uint64_t value = 0;
      std::memcpy(&value, source.data() + run.srcOffset + at, std::min<std::uint64_t>(8, run.bytes - at));
      bus::addDeviceChecksumWord(sums, run.tensor, run.tensorOffset / 8 + at / 8, value);
    }
  }
  return sums;
}

class CopyKernel : public testing::Test {
 protected:
  void SetUp() override {
    if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    layout_ = everyAlignment();
    source_.resize(layout_.srcBytes);
    std::mt19937_64 random(kSeed);
    for (auto& byte : source_) byte = static_cast<unsigned char>(random());
    ASSERT_EQ(cudaMalloc(&src_, layout_.srcBytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dst_, layout_.dstBytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sums_), sizeof(DeviceChecksumSums)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(src_, source_.data(), source_.size(), cudaMemcpyHostToDevice), cudaSuccess);
    want_ = hostSums(layout_, source_);
  }

  void TearDown() override {
    cudaFree(src_);
    cudaFree(dst_);
    cudaFree(sums_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // One batch of every run; `copy` false: read-only runs (destination 0), which fold the checksum only.
  void describe(CopyTable& table, bool copy) const {
    table.clear();
    table.beginBatch();
    for (const LaidRun& run : layout_.runs) {
      const auto from = reinterpret_cast<std::uint64_t>(src_) + run.srcOffset;
      const std::uint64_t to = copy ? reinterpret_cast<std::uint64_t>(dst_) + run.dstOffset : 0;
      table.add(from, to, run.bytes, run.tensor, run.tensorOffset);
    }
  }

  void clearDestination() const {
    ASSERT_EQ(cudaMemset(dst_, kUntouched, layout_.dstBytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(sums_, 0, sizeof(DeviceChecksumSums)), cudaSuccess);
  }

  // Every run where it belongs (or, `copied` false, the destination untouched), and nothing between them.
  void expectDestination(bool copied, const char* what) const {
    std::vector<unsigned char> held(layout_.dstBytes);
    ASSERT_EQ(cudaMemcpy(held.data(), dst_, held.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<unsigned char> expected(layout_.dstBytes, kUntouched);
    if (copied) {
      for (const LaidRun& run : layout_.runs) {
        std::memcpy(expected.data() + run.dstOffset, source_.data() + run.srcOffset, run.bytes);
      }
    }
    std::size_t wrongRuns = 0;
    for (const LaidRun& run : layout_.runs) {
      const bool same = std::memcmp(held.data() + run.dstOffset, expected.data() + run.dstOffset, run.bytes) == 0;
      if (!same && ++wrongRuns <= 5) {
        ADD_FAILURE() << what << ": run of " << run.bytes << " bytes from +" << run.srcOffset % 16 << " to +"
                      << run.dstOffset % 16 << " does not hold its source";
      }
    }
    EXPECT_EQ(wrongRuns, 0U) << what;
    // Anything else that differs is a byte written outside every run.
    const auto firstStray = std::mismatch(held.begin(), held.end(), expected.begin());
    EXPECT_TRUE(firstStray.first == held.end())
        << what << ": the destination differs at byte " << (firstStray.first - held.begin());
  }

  DeviceChecksumSums deviceSums() const {
    DeviceChecksumSums sums;
    EXPECT_EQ(cudaMemcpy(&sums, sums_, sizeof sums, cudaMemcpyDeviceToHost), cudaSuccess);
    return sums;
  }

  void expectSums(const DeviceChecksumSums& got, const char* what) const {
    EXPECT_EQ(got.lane[0], want_.lane[0]) << what;
    EXPECT_EQ(got.lane[1], want_.lane[1]) << what;
  }

  cudaStream_t stream_ = nullptr;
  Layout layout_;
  std::vector<unsigned char> source_;
  DeviceChecksumSums want_;
  void* src_ = nullptr;
  void* dst_ = nullptr;
  DeviceChecksumSums* sums_ = nullptr;
};

TEST_F(CopyKernel, EveryOffsetPairAndLengthArrivesByteForByteWithTheHostsSums) {
  CopyTable table;
  describe(table, true);
  ASSERT_TRUE(table.upload());
  // One block takes every chunk in turn; a few share them unevenly; the channels' grid takes one chunk each.
  for (const std::uint32_t blocks : {1U, 7U, 1024U}) {
    SCOPED_TRACE(testing::Message() << blocks << " blocks");
    clearDestination();
    ASSERT_TRUE(table.launch(0, sums_, CopyReport{}, blocks, stream_));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    expectDestination(true, "copy");
    expectSums(deviceSums(), "copy");
  }
}

TEST_F(CopyKernel, ReadOnlyRunsFoldTheSameSumsAndWriteNothing) {
  CopyTable table;
  describe(table, false);
  ASSERT_TRUE(table.upload());
  clearDestination();
  ASSERT_TRUE(table.launch(0, sums_, CopyReport{}, 1024, stream_));
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  expectDestination(false, "read-only");
  expectSums(deviceSums(), "read-only");
}

// The cuda_ipc receiver's way: the kernel's last block hands the sums to pinned host memory and leaves the device's
// at 0, so the next launch starts from nothing; two launches in a row each report the whole batch's sums.
TEST_F(CopyKernel, AReportingLaunchHandsOverTheSumsAndLeavesTheDeviceAtZero) {
  auto reporter = CopyReporter::create();
  ASSERT_TRUE(reporter) << reporter.error().detail;
  CopyTable table;
  describe(table, true);
  ASSERT_TRUE(table.upload());
  for (int launch = 0; launch < 2; ++launch) {
    SCOPED_TRACE(testing::Message() << "launch " << launch);
    clearDestination();
    const CopyReport report = reporter->next();
    ASSERT_TRUE(table.launch(0, reporter->deviceSums(), report, 1024, stream_));
    std::optional<DeviceChecksumSums> sums;
    const auto deadline = std::chrono::steady_clock::now() + kReportWait;
    while (!(sums = reporter->reported(report)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(sums.has_value()) << "the launch never reported";
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    expectDestination(true, "reporting copy");
    expectSums(*sums, "reported");
    DeviceChecksumSums left;
    ASSERT_EQ(cudaMemcpy(&left, reporter->deviceSums(), sizeof left, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(left.lane[0], 0U);
    EXPECT_EQ(left.lane[1], 0U);
  }
}

}  // namespace
}  // namespace wsync::test
