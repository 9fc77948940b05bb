// How the nccl channel cuts a region round into steps (region_steps.hpp), carried out on host memory for random
// layouts: every source packs its steps into staging, each chunk goes to the receiver that has the same step's chunk
// for that source (of the same size: both ends compute the same cuts), every receiver unpacks, and then every bound
// element is in its place, both sides' pair checksums are equal and equal the checksum of every word of the pair's
// segments. No step stages more than its budget; every piece starts on a word of its segment.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "region_layouts.hpp"
#include "wsync/bus/channel/nccl/region_steps.hpp"
#include "wsync/bus/channel/region_samples.hpp"

namespace wsync::bus {
namespace {

using test::planOf;
using Buffers = std::vector<std::vector<std::vector<std::byte>>>;  // [source][held region]
using Staging = std::vector<std::byte>;

bool operator==(const DeviceChecksumSums& a, const DeviceChecksumSums& b) {
  return a.lane[0] == b.lane[0] && a.lane[1] == b.lane[1];
}

// Folds the piece's words as the copy kernel does, from `bytes` (its first byte is the piece's first).
void fold(DeviceChecksumSums& sums, const StagedPiece& piece, const std::byte* bytes) {
  for (std::uint64_t at = 0; at < piece.bytes; at += 8) {
    std::uint64_t value = 0;
    std::memcpy(&value, bytes + at, std::min<std::uint64_t>(8, piece.bytes - at));
    addDeviceChecksumWord(sums, piece.segment, piece.firstWord + at / 8, value);
  }
}

// What the steps of a whole plan did: every receiver's locals, and each side's sums of every pair.
struct Carried {
  std::vector<std::vector<std::vector<std::byte>>> locals;  // [receiver][local]
  std::vector<std::vector<DeviceChecksumSums>> sent;        // [source][receiver]
  std::vector<std::vector<DeviceChecksumSums>> taken;       // [receiver][source]
};

// (Out-parameter: ASSERT needs a function returning void.)
void carryOut(const RegionPlan& plan, const Buffers& buffers, std::uint64_t stepBytes, Carried& carried) {
  carried.sent.assign(plan.sourceCount(), std::vector<DeviceChecksumSums>(plan.receiverCount()));
  carried.taken.assign(plan.receiverCount(), std::vector<DeviceChecksumSums>(plan.sourceCount()));
  std::vector<RegionSteps> sources;
  std::vector<RegionSteps> receivers;
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) sources.push_back(RegionSteps::forSource(plan, s, stepBytes));
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    receivers.push_back(RegionSteps::forReceiver(plan, r, stepBytes));
    carried.locals.push_back(test::localsOf(plan.bindings(r)));
  }
  std::size_t stepCount = 0;
  for (const auto& steps : sources) stepCount = std::max(stepCount, steps.steps().size());
  for (const auto& steps : receivers) stepCount = std::max(stepCount, steps.steps().size());
  for (std::size_t k = 0; k < stepCount; ++k) {
    // Each receiver's staging of step k, filled by the sources' sends.
    std::vector<Staging> inbound(plan.receiverCount());
    for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
      if (k < receivers[r].steps().size()) inbound[r].assign(receivers[r].steps()[k].stagedBytes, std::byte{0xEE});
    }
    for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
      if (k >= sources[s].steps().size()) continue;
      const RegionStep& step = sources[s].steps()[k];
      // The budget, unless it is under a smallest chunk for each peer.
      EXPECT_LE(step.stagedBytes, std::max(stepBytes, kPairStreamAlignment * sources[s].peers().size()))
          << "source " << s << " step " << k;
      Staging outbound(step.stagedBytes, std::byte{0xDD});
      for (const StepChunk& chunk : sources[s].chunksOf(step)) {
        for (const StagedPiece& piece : sources[s].piecesOf(chunk)) {
          EXPECT_EQ((chunk.staged + piece.staged) % 8, 0U);  // on a word, in every chunk
          const std::byte* from = buffers[s][piece.buffer].data() + piece.offset;
          std::memcpy(outbound.data() + chunk.staged + piece.staged, from, piece.bytes);
          fold(carried.sent[s][chunk.peer], piece, from);
        }
        // The receive of the same step from this source, of the same size.
        const std::uint32_t r = chunk.peer;
        ASSERT_LT(k, receivers[r].steps().size()) << "receiver " << r << " has no step " << k;
        const StepChunk* match = nullptr;
        for (const StepChunk& theirs : receivers[r].chunksOf(receivers[r].steps()[k])) {
          if (theirs.peer == s) match = &theirs;
        }
        ASSERT_NE(match, nullptr) << "receiver " << r << " takes nothing from source " << s << " in step " << k;
        ASSERT_EQ(match->wireBytes, chunk.wireBytes) << "source " << s << " receiver " << r << " step " << k;
        EXPECT_EQ(match->payload, chunk.payload);
        std::memcpy(inbound[r].data() + match->staged, outbound.data() + chunk.staged, chunk.wireBytes);
      }
    }
    for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
      if (k >= receivers[r].steps().size()) continue;
      EXPECT_LE(receivers[r].steps()[k].stagedBytes,
                std::max(stepBytes, kPairStreamAlignment * receivers[r].peers().size()))
          << "receiver " << r << " step " << k;
      for (const StepChunk& chunk : receivers[r].chunksOf(receivers[r].steps()[k])) {
        EXPECT_EQ(chunk.staged % kPairStreamAlignment, 0U);
        for (const StagedPiece& piece : receivers[r].piecesOf(chunk)) {
          const std::byte* from = inbound[r].data() + chunk.staged + piece.staged;
          std::memcpy(carried.locals[r][piece.buffer].data() + piece.offset, from, piece.bytes);
          fold(carried.taken[r][chunk.peer], piece, from);
        }
      }
    }
  }
}

// The checksum of every word of the pair's segments, from the source's buffers.
DeviceChecksumSums everyWord(const RegionPlan& plan, const Buffers& buffers, std::uint32_t s, std::uint32_t r) {
  DeviceChecksumSums sums;
  for (const Delivery& delivery : plan.deliveries(s, r)) {
    const Segment& segment = plan.segments()[delivery.segment];
    addWordSums(sums, plan, delivery.segment, buffers[s][segment.held], plan.sourceRuns(segment));
  }
  return sums;
}

void expectCarriedOut(const test::RegionLayout& layout, const RegionPlan& plan, std::uint64_t stepBytes) {
  const Buffers buffers = test::sourceBuffers(layout.manifest, plan);
  Carried carried;
  carryOut(plan, buffers, stepBytes, carried);
  if (testing::Test::HasFatalFailure()) return;
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    test::expectBoundElements(layout.manifest, plan.bindings(r), carried.locals[r], "receiver " + std::to_string(r));
    for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
      const DeviceChecksumSums reference = everyWord(plan, buffers, s, r);
      EXPECT_TRUE(carried.sent[s][r] == reference) << "source " << s << " receiver " << r;
      EXPECT_TRUE(carried.taken[r][s] == reference) << "source " << s << " receiver " << r;
    }
  }
}

TEST(RegionSteps, RandomLayoutsLandEveryBoundElementWithEqualChecksumsOnBothSides) {
  std::mt19937 random(20261204);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const test::RegionLayout layout = test::randomLayout(random, 40);
    auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    // Steps of a few chunks of 16 to 4096 bytes: pieces cut at chunks' edges, pairs of different step counts.
    const std::uint64_t stepBytes = std::uint64_t{16} << std::uniform_int_distribution<int>(0, 8)(random);
    expectCarriedOut(layout, *plan, stepBytes);
    if (HasFailure()) return;
  }
}

// Three sources of dim-0 shards into two receivers of column halves: each receiver has three peers, so a chunk is a
// third of the step's budget, and no step stages more than it.
TEST(RegionSteps, AChunkIsTheBudgetOverTheMostPeersOfAnyRank) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::F32, {96, 64}}});
  std::vector<SourceHoldings> sources(3);
  for (std::size_t s = 0; s < 3; ++s) {
    sources[s].regions = {{0, Box{{32 * static_cast<std::int64_t>(s), 0}, {32, 64}}}};
  }
  std::vector<ReceiverBindings> receivers(2);
  for (std::size_t r = 0; r < 2; ++r) {
    receivers[r].locals = {{"w", msg::DType::F32, {96, 32}}};
    receivers[r].regions = {{"w", Box{{0, 32 * static_cast<std::int64_t>(r)}, {96, 32}}, 0, {0, 0}, {96, 32}}};
  }
  auto plan = planOf(manifest, sources, receivers);
  ASSERT_TRUE(plan.has_value()) << plan.error().describe();
  constexpr std::uint64_t kStep = 3000;
  EXPECT_EQ(regionChunkBytes(*plan, kStep), 992U);  // 3000 / 3 down to a multiple of 16
  const RegionSteps source = RegionSteps::forSource(*plan, 1, kStep);
  EXPECT_EQ(source.peers(), (std::vector<std::uint32_t>{0, 1}));
  // 32 rows x 32 columns x 4 bytes to each receiver: 4096 bytes, five chunks of 992 (the last 128).
  ASSERT_EQ(source.steps().size(), 5U);
  EXPECT_EQ(source.steps()[0].stagedBytes, 2 * 992U);
  EXPECT_EQ(source.steps()[4].stagedBytes, 2 * 128U);
  const RegionSteps receiver = RegionSteps::forReceiver(*plan, 0, kStep);
  EXPECT_EQ(receiver.peers(), (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(receiver.maxStagedBytes(), 3 * 992U);
  test::RegionLayout layout{manifest, sources, receivers};
  expectCarriedOut(layout, *plan, kStep);
}

// Columns 1..3 of a bf16 tensor: rows of 6 bytes, each padded to a word in the stream, so a cut never splits a word.
TEST(RegionSteps, RowsOfPartWordsArePaddedToWordsInTheStream) {
  const Manifest manifest = *Manifest::create({{"v", msg::DType::BF16, {100, 8}}});
  ReceiverBindings slice;
  slice.locals = {{"v", msg::DType::BF16, {100, 3}}};
  slice.regions = {{"v", Box{{0, 1}, {100, 3}}, 0, {0, 0}, {100, 3}}};
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {slice});
  ASSERT_TRUE(plan.has_value()) << plan.error().describe();
  EXPECT_EQ(pairStreamBytes(*plan, 0, 0), 800U);  // 100 rows of one word
  const RegionSteps steps = RegionSteps::forSource(*plan, 0, 48);
  ASSERT_EQ(steps.steps().size(), 17U);  // 800 / 48, up
  for (const RegionStep& step : steps.steps()) {
    for (const StepChunk& chunk : steps.chunksOf(step)) {
      for (const StagedPiece& piece : steps.piecesOf(chunk)) {
        EXPECT_EQ(piece.staged % 8, 0U);
        EXPECT_EQ(piece.bytes, 6U);
      }
    }
  }
  test::RegionLayout layout{manifest, {wholeHoldings(manifest)}, {slice}};
  expectCarriedOut(layout, *plan, 48);
}

}  // namespace
}  // namespace wsync::bus
