// The sampled verification of region rounds on the GPU channels (region_samples.hpp): for every layout, the sample a
// source folds from its buffers equals the one each receiver folds from its local tensors once the segment's bytes
// are in place, pair by pair; a segment of up to a window is checked whole, a larger one a window every stride; a
// byte out of place in a sampled window changes the sums, and the sampled pieces always start on a word.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "region_layouts.hpp"
#include "wsync/bus/channel/region_samples.hpp"

namespace wsync::bus {
namespace {

using test::planOf;
using Buffers = std::vector<std::vector<std::vector<std::byte>>>;  // [source][held region]

// Receiver r's local tensors with every delivery's bytes copied in from the sources' buffers (the plan's copy runs,
// as a channel copies them).
std::vector<std::vector<std::byte>> placed(const RegionPlan& plan, const Buffers& buffers, std::uint32_t r) {
  auto locals = test::localsOf(plan.bindings(r));
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
    for (const Delivery& delivery : plan.deliveries(s, r)) {
      const Segment& segment = plan.segments()[delivery.segment];
      for (const CopyRun& run : plan.copyRuns(r, delivery)) {
        std::memcpy(locals[plan.localOf(r, delivery)].data() + run.destination,
                    buffers[s][segment.held].data() + run.source, run.bytes);
      }
    }
  }
  return locals;
}

// What each side folds for pair (s, r): the source from its buffers, the receiver from its locals.
DeviceChecksumSums sourceSample(const RegionPlan& plan, const Buffers& buffers, std::uint32_t s, std::uint32_t r) {
  DeviceChecksumSums sums;
  for (const Delivery& delivery : plan.deliveries(s, r)) {
    const Segment& segment = plan.segments()[delivery.segment];
    addSampledSums(sums, plan, delivery.segment, buffers[s][segment.held], plan.sourceRuns(segment));
  }
  return sums;
}

DeviceChecksumSums receiverSample(const RegionPlan& plan, const std::vector<std::vector<std::byte>>& locals,
                                  std::uint32_t s, std::uint32_t r) {
  DeviceChecksumSums sums;
  for (const Delivery& delivery : plan.deliveries(s, r)) {
    addSampledSums(sums, plan, delivery.segment, locals[plan.localOf(r, delivery)], plan.destinationRuns(r, delivery));
  }
  return sums;
}

bool operator==(const DeviceChecksumSums& a, const DeviceChecksumSums& b) {
  return a.lane[0] == b.lane[0] && a.lane[1] == b.lane[1];
}

TEST(RegionSamples, BothSidesFoldTheSameSampleForEveryPairOfRandomLayouts) {
  std::mt19937 random(20261203);
  int sampledPairs = 0;
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const test::RegionLayout layout = test::randomLayout(random, 40);
    auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    const Buffers buffers = test::sourceBuffers(layout.manifest, *plan);
    for (std::uint32_t r = 0; r < plan->receiverCount(); ++r) {
      const auto locals = placed(*plan, buffers, r);
      for (std::uint32_t s = 0; s < plan->sourceCount(); ++s) {
        const DeviceChecksumSums sent = sourceSample(*plan, buffers, s, r);
        EXPECT_TRUE(sent == receiverSample(*plan, locals, s, r)) << "source " << s << " receiver " << r;
        sampledPairs += plan->deliveries(s, r).empty() ? 0 : 1;
      }
    }
    for (const Segment& segment : plan->segments()) {
      for (const SampledRun& run : sampledRuns(*plan, segment, plan->sourceRuns(segment))) {
        ASSERT_GT(run.bytes, 0U);
      }
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(sampledPairs, 200);
}

// A tensor of 16 MiB: a window every stride. A small tensor: whole. Columns of a bf16 tensor cut into rows of 6
// bytes: rows that are not whole words, each its own range with its last word padded.
TEST(RegionSamples, AWindowEveryStrideAndSmallSegmentsWhole) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::F32, {4096, 1024}}, {"n", msg::DType::BF16, {3}}});
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest)});
  ASSERT_TRUE(plan.has_value());
  const Segment& big = plan->segments()[0];
  ASSERT_EQ(big.bytes, 16U << 20);
  const auto runs = sampledRuns(*plan, big, plan->sourceRuns(big));
  ASSERT_EQ(runs.size(), (16U << 20) / (kSampleStrideWords * 8));
  for (std::size_t k = 0; k < runs.size(); ++k) {
    EXPECT_EQ(runs[k], (SampledRun{k * kSampleStrideWords * 8, kSampleWindowWords * 8, k * kSampleStrideWords}));
  }
  const Segment& small = plan->segments()[1];
  EXPECT_EQ(sampledRuns(*plan, small, plan->sourceRuns(small)), (std::vector<SampledRun>{{0, 6, 0}}));

  // Columns 1..3 of a bf16 tensor: rows of 6 bytes, one word each (padded), one range a row.
  const Manifest narrow = *Manifest::create({{"v", msg::DType::BF16, {10000, 8}}});
  ReceiverBindings slice;
  slice.locals = {{"v", msg::DType::BF16, {10000, 3}}};
  slice.regions = {{"v", Box{{0, 1}, {10000, 3}}, 0, {0, 0}, {10000, 3}}};
  auto sliced = planOf(narrow, {wholeHoldings(narrow)}, {slice});
  ASSERT_TRUE(sliced.has_value()) << sliced.error().describe();
  const Segment& cut = sliced->segments()[0];
  EXPECT_EQ(segmentRowBytes(*sliced, cut), 6U);
  const auto source = sampledRuns(*sliced, cut, sliced->sourceRuns(cut));
  ASSERT_EQ(source.size(), kSampleWindowWords);      // 10,000 words: the first window's rows
  EXPECT_EQ(source[1], (SampledRun{16 + 2, 6, 1}));  // row 1 of the whole tensor, column 1
  const auto destination = sampledRuns(*sliced, cut, sliced->destinationRuns(0, sliced->deliveries(0, 0)[0]));
  ASSERT_EQ(destination.size(), kSampleWindowWords);
  EXPECT_EQ(destination[1], (SampledRun{6, 6, 1}));
}

// A byte changed in a sampled window changes the sums; one outside every window does not (the sample's limit).
TEST(RegionSamples, AByteOutOfPlaceInASampleChangesTheSums) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::F32, {4096, 1024}}});
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest)});
  ASSERT_TRUE(plan.has_value());
  const Buffers buffers = test::sourceBuffers(manifest, *plan);
  const DeviceChecksumSums sent = sourceSample(*plan, buffers, 0, 0);
  auto locals = placed(*plan, buffers, 0);
  ASSERT_TRUE(sent == receiverSample(*plan, locals, 0, 0));
  locals[0][kSampleStrideWords * 8 + 100] ^= std::byte{1};  // in the second window
  EXPECT_FALSE(sent == receiverSample(*plan, locals, 0, 0));
  locals[0][kSampleStrideWords * 8 + 100] ^= std::byte{1};
  locals[0][kSampleWindowWords * 8 + 100] ^= std::byte{1};  // past the first window
  EXPECT_TRUE(sent == receiverSample(*plan, locals, 0, 0));
}

}  // namespace
}  // namespace wsync::bus
