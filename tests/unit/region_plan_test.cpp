// The region plan: carried out on host memory, it puts every checkpoint element each receiver binds into its place,
// each local byte written exactly once, from any layout of sources (dim-k shards, uneven, replicated) into any
// bindings (whole, slices, fused, stacked); replicated regions are spread over their holders; runs are exact.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "region_layouts.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::bus {
namespace {

using test::planOf;

// Runs the plan on host memory: every source's buffers cut from the checkpoint, every delivery copied by its runs.
// Returns each receiver's local tensors and counts, per byte, how often it was written.
struct Outcome {
  std::vector<std::vector<std::vector<std::byte>>> locals;  // [receiver][local]
  std::vector<std::vector<std::vector<int>>> writes;
};

Outcome carryOut(const Manifest& manifest, const RegionPlan& plan) {
  const auto buffers = test::sourceBuffers(manifest, plan);
  Outcome outcome;
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    std::vector<std::vector<std::byte>> locals;
    std::vector<std::vector<int>> writes;
    for (const LocalTensor& local : plan.bindings(r).locals) {
      const std::uint64_t bytes = volume(wholeBox(local.shape)) * elementBytes(local.dtype);
      locals.emplace_back(bytes, std::byte{0});
      writes.emplace_back(bytes, 0);
    }
    for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
      std::uint64_t moved = 0;
      for (const Delivery& delivery : plan.deliveries(s, r)) {
        const Segment& segment = plan.segments()[delivery.segment];
        EXPECT_EQ(segment.source, s);
        const auto& from = buffers[s][segment.held];
        auto& to = locals[plan.localOf(r, delivery)];
        auto& counted = writes[plan.localOf(r, delivery)];
        std::uint64_t copied = 0;
        for (const CopyRun& run : plan.copyRuns(r, delivery)) {
          EXPECT_LE(run.source + run.bytes, from.size());
          EXPECT_LE(run.destination + run.bytes, to.size());
          std::memcpy(to.data() + run.destination, from.data() + run.source, run.bytes);
          for (std::uint64_t b = 0; b < run.bytes; ++b) ++counted[run.destination + b];
          copied += run.bytes;
        }
        EXPECT_EQ(copied, segment.bytes);
        moved += segment.bytes;
      }
      EXPECT_EQ(moved, plan.bytes(s, r));
    }
    outcome.locals.push_back(std::move(locals));
    outcome.writes.push_back(std::move(writes));
  }
  return outcome;
}

// Checks that every receiver's local tensors hold exactly the checkpoint elements its bindings name, each byte
// written once.
void expectBound(const Manifest& manifest, const RegionPlan& plan) {
  const Outcome outcome = carryOut(manifest, plan);
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    const ReceiverBindings& bindings = plan.bindings(r);
    for (std::size_t l = 0; l < bindings.locals.size(); ++l) {
      for (std::size_t b = 0; b < outcome.writes[r][l].size(); ++b) {
        ASSERT_EQ(outcome.writes[r][l][b], 1)
            << "receiver " << r << " local " << bindings.locals[l].name << " byte " << b;
      }
    }
    test::expectBoundElements(manifest, bindings, outcome.locals[r], "receiver " + std::to_string(r));
  }
}

TEST(RegionPlan, RunsOfABoxFollowTheBuffersLayout) {
  const std::vector<std::int64_t> shape = {4, 6};
  EXPECT_EQ(runsOf(shape, wholeBox(shape), 2), (std::vector<ByteRun>{{0, 48}}));
  EXPECT_EQ(runsOf(shape, Box{{1, 0}, {2, 6}}, 2), (std::vector<ByteRun>{{12, 24}}));  // rows: one run
  EXPECT_EQ(runsOf(shape, Box{{0, 3}, {4, 3}}, 2),                                     // columns: a run a row
            (std::vector<ByteRun>{{6, 6}, {18, 6}, {30, 6}, {42, 6}}));
  EXPECT_EQ(runsOf(std::vector<std::int64_t>{}, Box{}, 4), (std::vector<ByteRun>{{0, 4}}));  // a scalar
  EXPECT_TRUE(runsOf(shape, Box{{0, 0}, {0, 6}}, 2).empty());
  EXPECT_EQ(pairRuns(std::vector<ByteRun>{{0, 10}, {20, 10}}, std::vector<ByteRun>{{100, 5}, {200, 15}}),
            (std::vector<CopyRun>{{0, 100, 5}, {5, 200, 5}, {20, 205, 10}}));
}

TEST(RegionPlan, OneWholeSourceIntoWholeReceiversIsOneSegmentATensorSharedByAll) {
  const Manifest manifest =
      *Manifest::create({{"a", msg::DType::F32, {3, 5}}, {"b", msg::DType::BF16, {7}}, {"c", msg::DType::U8, {2, 2}}});
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest), wholeBindings(manifest)});
  ASSERT_TRUE(plan) << plan.error().describe();
  ASSERT_EQ(plan->segments().size(), 3U);
  for (std::uint32_t t = 0; t < 3; ++t) {
    EXPECT_EQ(plan->segments()[t].tensor, t);
    EXPECT_EQ(plan->segments()[t].targetCount, 2U);
    EXPECT_EQ(plan->segments()[t].bytes, manifest.tensorBytes(t));
  }
  EXPECT_EQ(plan->bytes(0, 0), manifest.totalBytes());
  EXPECT_EQ(plan->bytes(0, 1), manifest.totalBytes());
  EXPECT_EQ(plan->bytesRead(0), manifest.totalBytes());
  expectBound(manifest, *plan);
}

TEST(RegionPlan, Dim0ShardsOfFourSourcesIntoAWholeReceiverEachSendTheirShard) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::BF16, {10, 8}}, {"v", msg::DType::F32, {3}}});
  // FSDP2: 3 rows a rank (the last 1); the vector 1, 1, 1, 0.
  std::vector<SourceHoldings> sources(4);
  const std::int64_t rowsOf[4] = {3, 3, 3, 1};
  std::int64_t first = 0;
  for (std::uint32_t s = 0; s < 4; ++s) {
    sources[s].regions.push_back(HeldRegion{0, Box{{first, 0}, {rowsOf[s], 8}}});
    sources[s].regions.push_back(HeldRegion{1, Box{{std::min<std::int64_t>(s, 3)}, {s < 3 ? 1 : 0}}});
    first += rowsOf[s];
  }
  auto plan = planOf(manifest, sources, {wholeBindings(manifest)});
  ASSERT_TRUE(plan) << plan.error().describe();
  for (std::uint32_t s = 0; s < 4; ++s) {
    EXPECT_EQ(plan->bytes(s, 0), static_cast<std::uint64_t>(rowsOf[s]) * 8 * 2 + (s < 3 ? 4 : 0)) << "source " << s;
  }
  EXPECT_EQ(plan->bytesReceived(0), manifest.totalBytes());
  expectBound(manifest, *plan);
}

TEST(RegionPlan, ReplicatedRegionsAreSpreadOverTheirHolders) {
  std::vector<TensorSpec> tensors;
  for (int t = 0; t < 8; ++t) tensors.push_back({"t" + std::to_string(t), msg::DType::F32, {16}});
  const Manifest manifest = *Manifest::create(std::move(tensors));
  auto plan = planOf(manifest, {wholeHoldings(manifest), wholeHoldings(manifest)},
                     {wholeBindings(manifest), wholeBindings(manifest)});
  ASSERT_TRUE(plan) << plan.error().describe();
  // Each tensor read once, by one source, for both receivers; the two sources share the tensors evenly.
  EXPECT_EQ(plan->segments().size(), 8U);
  EXPECT_EQ(plan->bytesRead(0), manifest.totalBytes() / 2);
  EXPECT_EQ(plan->bytesRead(1), manifest.totalBytes() / 2);
  EXPECT_EQ(plan->bytesReceived(0), manifest.totalBytes());
  expectBound(manifest, *plan);
}

TEST(RegionPlan, TensorParallelReceiversGetOnlyTheirSlices) {
  // Column-parallel q [8, 4] (rows split) and row-parallel o [4, 8] (columns split), from two dim-0 shards each.
  const Manifest manifest = *Manifest::create({{"q", msg::DType::BF16, {8, 4}}, {"o", msg::DType::BF16, {4, 8}}});
  const std::vector<SourceHoldings> sources = {
      {{HeldRegion{0, Box{{0, 0}, {4, 4}}}, HeldRegion{1, Box{{0, 0}, {2, 8}}}}},
      {{HeldRegion{0, Box{{4, 0}, {4, 4}}}, HeldRegion{1, Box{{2, 0}, {2, 8}}}}}};
  std::vector<ReceiverBindings> receivers(2);
  for (std::size_t r = 0; r < 2; ++r) {
    const auto first = static_cast<std::int64_t>(4 * r);
    receivers[r].locals = {{"q", msg::DType::BF16, {4, 4}}, {"o", msg::DType::BF16, {4, 4}}};
    receivers[r].regions = {{"q", Box{{first, 0}, {4, 4}}, 0, {0, 0}, {4, 4}},
                            {"o", Box{{0, first}, {4, 4}}, 1, {0, 0}, {4, 4}}};
  }
  auto plan = planOf(manifest, sources, receivers);
  ASSERT_TRUE(plan) << plan.error().describe();
  for (std::uint32_t r = 0; r < 2; ++r) EXPECT_EQ(plan->bytesReceived(r), manifest.totalBytes() / 2);
  // Receiver 0's q rows come only from source 0; o's columns from both.
  EXPECT_EQ(plan->bytes(0, 0), (4 * 4 + 2 * 4) * 2U);
  EXPECT_EQ(plan->bytes(1, 0), (2 * 4) * 2U);
  expectBound(manifest, *plan);
}

TEST(RegionPlan, ARefusalNamesTheReceiverOrSource) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::BF16, {4, 4}}});
  ReceiverBindings outside;
  outside.locals = {{"w", msg::DType::BF16, {4, 4}}};
  outside.regions = {{"w", Box{{2, 0}, {4, 4}}, 0, {0, 0}, {4, 4}}};
  auto refused = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest), outside});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, RegionError::OutsideTensor);
  EXPECT_EQ(refused.error().detail.rfind("receiver 1 binds region [2:6, 0:4] of tensor 'w' [4, 4]", 0), 0U)
      << refused.error().detail;
  auto gap = planOf(manifest, {SourceHoldings{{HeldRegion{0, Box{{0, 0}, {3, 4}}}}}}, {wholeBindings(manifest)});
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, RegionError::Gap);
  EXPECT_EQ(gap.error().detail, "no source holds region [3:4, 0:4] of tensor 'w' [4, 4]");
}

// A receiver that plans with its own bindings alone takes the same deliveries, in the same order, from the same
// sources, as the plan with every receiver gives it.
void expectPlansAlike(const RegionPlan& full, std::uint32_t receiver, const std::vector<SourceHoldings>& sources) {
  const Manifest manifest = *Manifest::create(std::vector<TensorSpec>(full.tensors().begin(), full.tensors().end()));
  auto alone = planOf(manifest, sources, {full.bindings(receiver)});
  ASSERT_TRUE(alone) << alone.error().describe();
  for (std::uint32_t s = 0; s < full.sourceCount(); ++s) {
    const auto expected = full.deliveries(s, receiver);
    const auto got = alone->deliveries(s, 0);
    ASSERT_EQ(got.size(), expected.size()) << "source " << s << " receiver " << receiver;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const Segment& a = full.segments()[expected[i].segment];
      const Segment& b = alone->segments()[got[i].segment];
      EXPECT_EQ(b.held, a.held);
      EXPECT_EQ(b.bytes, a.bytes);
      EXPECT_EQ(got[i].bound, expected[i].bound);
      EXPECT_EQ(alone->boxOf(b), full.boxOf(a));
    }
  }
}

// Random layouts (region_layouts.hpp: dim-k shards, uneven, empty or replicated; whole, sliced, fused, stacked or
// unbound), small enough to carry out often.
TEST(RegionPlan, RandomLayoutsPutEveryBoundElementInItsPlaceOnce) {
  std::mt19937 random(20261202);
  for (int trial = 0; trial < 300; ++trial) {
    const test::RegionLayout layout = test::randomLayout(random, 7);
    auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
    ASSERT_TRUE(plan) << "trial " << trial << ": " << plan.error().describe();
    expectBound(layout.manifest, *plan);
    for (std::uint32_t r = 0; r < plan->receiverCount(); ++r) expectPlansAlike(*plan, r, layout.sources);
    if (testing::Test::HasFatalFailure()) {
      FAIL() << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace wsync::bus
