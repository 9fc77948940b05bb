// Regions: what a source may declare it holds and a receiver may bind, and how each refusal names the tensor, the
// region and the agent.
#include <gtest/gtest.h>

#include "wsync/bus/protocol/region.hpp"

namespace wsync::bus {
namespace {

Manifest twoTensors() { return *Manifest::create({{"w", msg::DType::BF16, {10, 4}}, {"b", msg::DType::F32, {6}}}); }

HeldRegion rows(std::uint32_t tensor, std::int64_t first, std::int64_t count, std::int64_t width) {
  return HeldRegion{tensor, Box{{first, 0}, {count, width}}};
}

HeldRegion span1(std::uint32_t tensor, std::int64_t first, std::int64_t count) {
  return HeldRegion{tensor, Box{{first}, {count}}};
}

const std::vector<std::string> kSourceNames = {"source 0 ('t0')", "source 1 ('t1')", "source 2 ('t2')"};

TEST(Region, BoxArithmetic) {
  const Box a{{0, 0}, {4, 4}};
  const Box b{{2, 3}, {4, 4}};
  EXPECT_TRUE(meets(a, b));
  EXPECT_EQ(intersect(a, b), (Box{{2, 3}, {2, 1}}));
  EXPECT_FALSE(meets(a, Box{{4, 0}, {2, 4}}));  // touching is not meeting
  EXPECT_EQ(volume(a), 16U);
  EXPECT_EQ(format(b), "[2:6, 3:7]");
  EXPECT_TRUE(boxWithin(b, std::vector<std::int64_t>{6, 7}));
  EXPECT_FALSE(boxWithin(b, std::vector<std::int64_t>{6, 6}));
  EXPECT_FALSE(boxWithin(Box{{-1, 0}, {1, 1}}, std::vector<std::int64_t>{6, 6}));
}

TEST(Region, UnevenDim0ShardsOfEveryTensorCoverTheManifest) {
  const Manifest manifest = twoTensors();
  // FSDP2's split: ceil(10 / 3) = 4 rows a rank, the last rank the remaining 2; the vector 2, 2, 2.
  const std::vector<SourceHoldings> sources = {
      {{rows(0, 0, 4, 4), span1(1, 0, 2)}}, {{rows(0, 4, 4, 4), span1(1, 2, 2)}}, {{rows(0, 8, 2, 4), span1(1, 4, 2)}}};
  for (std::size_t s = 0; s < sources.size(); ++s) ASSERT_TRUE(checkHoldings(manifest, sources[s], kSourceNames[s]));
  EXPECT_TRUE(checkCoverage(manifest, sources, kSourceNames));
}

TEST(Region, ReplicasHoldingEqualRegionsCoverOnce) {
  const Manifest manifest = twoTensors();
  const std::vector<SourceHoldings> sources = {wholeHoldings(manifest), wholeHoldings(manifest)};
  EXPECT_TRUE(checkCoverage(manifest, sources, kSourceNames));
}

TEST(Region, AGapNamesTheRegionNoSourceHolds) {
  const Manifest manifest = twoTensors();
  const std::vector<SourceHoldings> sources = {{{rows(0, 0, 4, 4), span1(1, 0, 6)}}, {{rows(0, 4, 4, 4)}}};
  const auto covered = checkCoverage(manifest, sources, kSourceNames);
  ASSERT_FALSE(covered);
  EXPECT_EQ(covered.error().code, RegionError::Gap);
  EXPECT_EQ(covered.error().detail, "no source holds region [8:10, 0:4] of tensor 'w' [10, 4]");
}

TEST(Region, SourcesWhoseRegionsPartlyOverlapAreRefusedNamingBoth) {
  const Manifest manifest = twoTensors();
  const std::vector<SourceHoldings> sources = {{{rows(0, 0, 6, 4), span1(1, 0, 6)}}, {{rows(0, 4, 6, 4)}}};
  const auto covered = checkCoverage(manifest, sources, kSourceNames);
  ASSERT_FALSE(covered);
  EXPECT_EQ(covered.error().code, RegionError::Overlap);
  EXPECT_NE(covered.error().detail.find("source 0 ('t0') holds region [0:6, 0:4] and source 1 ('t1') region [4:10, "
                                        "0:4] of tensor 'w' [10, 4]: they overlap in [4:6, 0:4]"),
            std::string::npos)
      << covered.error().detail;
}

TEST(Region, ASourceThatHoldsOverlappingRegionsOfItsOwnIsRefused) {
  const Manifest manifest = twoTensors();
  const auto checked = checkHoldings(manifest, {{rows(0, 0, 6, 4), rows(0, 5, 5, 4)}}, kSourceNames[0]);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().code, RegionError::Overlap);
  EXPECT_NE(checked.error().detail.find("overlap in [5:6, 0:4]"), std::string::npos) << checked.error().detail;
}

TEST(Region, HoldingsOutsideTheirTensorOrOfAnotherRankOrTensorAreRefused) {
  const Manifest manifest = twoTensors();
  auto outside = checkHoldings(manifest, {{rows(0, 8, 4, 4)}}, kSourceNames[0]);
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, RegionError::OutsideTensor);
  EXPECT_EQ(outside.error().detail,
            "source 0 ('t0') holds region [8:12, 0:4] of tensor 'w' [10, 4], outside the tensor");
  auto rank = checkHoldings(manifest, {{span1(0, 0, 10)}}, kSourceNames[0]);
  ASSERT_FALSE(rank);
  EXPECT_EQ(rank.error().code, RegionError::RankMismatch);
  auto unknown = checkHoldings(manifest, {{span1(7, 0, 1)}}, kSourceNames[0]);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, RegionError::UnknownTensor);
}

TEST(Region, WholeBindingsOfEveryTensorAreValid) {
  const Manifest manifest = twoTensors();
  EXPECT_TRUE(checkBindings(manifest, wholeBindings(manifest), "worker 'w0'"));
}

TEST(Region, AFusedLocalTensorFilledBySlicesOfSeveralCheckpointTensorsIsValid) {
  // q [8, 4] and k [4, 4] into qkv [6, 4] of a TP=2 rank: q rows 0:4 then k rows 0:2.
  const Manifest manifest = *Manifest::create({{"q", msg::DType::BF16, {8, 4}}, {"k", msg::DType::BF16, {4, 4}}});
  ReceiverBindings bindings;
  bindings.locals = {{"qkv", msg::DType::BF16, {6, 4}}};
  bindings.regions = {{"q", Box{{0, 0}, {4, 4}}, 0, {0, 0}, {4, 4}}, {"k", Box{{0, 0}, {2, 4}}, 0, {4, 0}, {2, 4}}};
  EXPECT_TRUE(checkBindings(manifest, bindings, "worker 'w0'"));
}

TEST(Region, AnExpertGoesIntoItsPlaceInAStackOfExperts) {
  const Manifest manifest =
      *Manifest::create({{"experts.0.up", msg::DType::BF16, {8, 4}}, {"experts.1.up", msg::DType::BF16, {8, 4}}});
  ReceiverBindings bindings;
  bindings.locals = {{"w_up", msg::DType::BF16, {2, 8, 4}}};
  bindings.regions = {{"experts.0.up", Box{{0, 0}, {8, 4}}, 0, {0, 0, 0}, {1, 8, 4}},
                      {"experts.1.up", Box{{0, 0}, {8, 4}}, 0, {1, 0, 0}, {1, 8, 4}}};
  EXPECT_TRUE(checkBindings(manifest, bindings, "worker 'w0'"));
}

TEST(Region, ALocalTensorLeftPartlyUnfilledIsAGap) {
  const Manifest manifest = twoTensors();
  ReceiverBindings bindings;
  bindings.locals = {{"w_half", msg::DType::BF16, {6, 4}}};
  bindings.regions = {{"w", Box{{0, 0}, {5, 4}}, 0, {0, 0}, {5, 4}}};
  const auto checked = checkBindings(manifest, bindings, "worker 'w0'");
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().code, RegionError::Gap);
  EXPECT_EQ(checked.error().detail, "worker 'w0': no bound region fills [5:6, 0:4] of local tensor 'w_half' [6, 4]");
}

TEST(Region, TwoRegionsBoundIntoTheSameElementsOverlap) {
  const Manifest manifest = twoTensors();
  ReceiverBindings bindings;
  bindings.locals = {{"w", msg::DType::BF16, {5, 4}}};
  bindings.regions = {{"w", Box{{0, 0}, {3, 4}}, 0, {0, 0}, {3, 4}}, {"w", Box{{3, 0}, {3, 4}}, 0, {2, 0}, {3, 4}}};
  const auto checked = checkBindings(manifest, bindings, "worker 'w0'");
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().code, RegionError::Overlap);
  EXPECT_NE(checked.error().detail.find("overlapping in [2:3, 0:4]"), std::string::npos) << checked.error().detail;
}

TEST(Region, BindingsNameWhatIsWrongWithARegion) {
  const Manifest manifest = twoTensors();
  auto bind = [&](BoundRegion bound, LocalTensor local) {
    ReceiverBindings bindings;
    bindings.locals = {std::move(local)};
    bindings.regions = {std::move(bound)};
    return checkBindings(manifest, bindings, "worker 'w0'");
  };
  const auto outside = bind({"w", Box{{8, 0}, {4, 4}}, 0, {0, 0}, {4, 4}}, {"w", msg::DType::BF16, {4, 4}});
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, RegionError::OutsideTensor);
  EXPECT_NE(outside.error().detail.find("region [8:12, 0:4] of tensor 'w' [10, 4]"), std::string::npos);
  const auto dtype = bind({"w", Box{{0, 0}, {4, 4}}, 0, {0, 0}, {4, 4}}, {"w", msg::DType::F16, {4, 4}});
  ASSERT_FALSE(dtype);
  EXPECT_EQ(dtype.error().code, RegionError::DTypeMismatch);
  const auto shape = bind({"w", Box{{0, 0}, {4, 4}}, 0, {0, 0}, {2, 8}}, {"w", msg::DType::BF16, {2, 8}});
  ASSERT_FALSE(shape);
  EXPECT_EQ(shape.error().code, RegionError::ShapeMismatch);
  const auto place = bind({"w", Box{{0, 0}, {4, 4}}, 0, {1, 0}, {4, 4}}, {"w", msg::DType::BF16, {4, 4}});
  ASSERT_FALSE(place);
  EXPECT_EQ(place.error().code, RegionError::OutsideTensor);
  const auto tensor = bind({"x", Box{{0}, {1}}, 0, {0}, {1}}, {"w", msg::DType::BF16, {1}});
  ASSERT_FALSE(tensor);
  EXPECT_EQ(tensor.error().code, RegionError::UnknownTensor);
}

TEST(Region, DigestsTellDeclarationsApart) {
  const Manifest manifest = twoTensors();
  const SourceHoldings whole = wholeHoldings(manifest);
  EXPECT_EQ(digestOf(whole), digestOf(wholeHoldings(manifest)));
  SourceHoldings moved = whole;
  moved.regions[0].box.extent[0] = 9;
  EXPECT_NE(digestOf(whole), digestOf(moved));
  const ReceiverBindings bindings = wholeBindings(manifest);
  ReceiverBindings renamed = bindings;
  renamed.locals[1].name = "c";
  EXPECT_NE(digestOf(bindings), digestOf(renamed));
}

}  // namespace
}  // namespace wsync::bus
