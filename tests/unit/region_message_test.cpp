// Holdings and bindings on the wire: what is sent is what is decoded, and a declaration whose digest is not its own,
// or whose boxes are malformed, is refused.
#include <gtest/gtest.h>

#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/region_message.hpp"

namespace wsync::bus {
namespace {

SourceHoldings sampleHoldings() {
  return SourceHoldings{
      {HeldRegion{0, Box{{4, 0}, {4, 64}}}, HeldRegion{2, Box{{}, {}}}, HeldRegion{1, Box{{0}, {3}}}}};
}

ReceiverBindings sampleBindings() {
  ReceiverBindings bindings;
  bindings.locals = {{"qkv", msg::DType::BF16, {6, 4}}, {"norm", msg::DType::F32, {4}}};
  bindings.regions = {{"q", Box{{0, 0}, {4, 4}}, 0, {0, 0}, {4, 4}},
                      {"k", Box{{2, 0}, {2, 4}}, 0, {4, 0}, {2, 4}},
                      {"norm", Box{{0}, {4}}, 1, {0}, {4}}};
  return bindings;
}

TEST(RegionMessage, HoldingsTravelWholeInAMessage) {
  MessageBuilder builder;
  const Digest manifest{7, 9};
  const auto bytes = builder.finish(toMessage(builder.fbb(), sampleHoldings(), manifest));
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message) << toString(message.error());
  auto decoded = holdingsFromMessage(*message->as<msg::Holdings>());
  ASSERT_TRUE(decoded) << decoded.error().describe();
  EXPECT_EQ(decoded->holdings, sampleHoldings());
  EXPECT_EQ(decoded->digest, digestOf(sampleHoldings()));
  EXPECT_EQ(decoded->manifest, manifest);
}

TEST(RegionMessage, BindingsTravelWholeInAMessage) {
  MessageBuilder builder;
  const auto bytes = builder.finish(toMessage(builder.fbb(), sampleBindings()));
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message) << toString(message.error());
  auto decoded = bindingsFromMessage(*message->as<msg::Bindings>());
  ASSERT_TRUE(decoded) << decoded.error().describe();
  EXPECT_EQ(*decoded, sampleBindings());
}

TEST(RegionMessage, ADeclarationThatIsNotItsDigestsIsRefused) {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<std::int64_t> offset = {0};
  const std::vector<std::int64_t> extent = {3};
  std::vector<flatbuffers::Offset<msg::Region>> regions = {msg::CreateRegionDirect(fbb, 1, &offset, &extent)};
  const msg::Digest128 digest = toMessage(digestOf(sampleHoldings()));  // another declaration's
  fbb.Finish(msg::CreateHoldingsDirect(fbb, &digest, nullptr, &regions));
  auto decoded = holdingsFromMessage(*flatbuffers::GetRoot<msg::Holdings>(fbb.GetBufferPointer()));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().code, RegionError::SourceMismatch);

  // Bindings naming one region where the digest is of three: a declaration replaced in transit.
  flatbuffers::FlatBufferBuilder other;
  const std::vector<std::int64_t> shape = {4};
  std::vector<flatbuffers::Offset<msg::LocalTensorInfo>> locals = {
      msg::CreateLocalTensorInfoDirect(other, "norm", msg::DType::F32, &shape)};
  std::vector<flatbuffers::Offset<msg::BoundRegionInfo>> bound = {
      msg::CreateBoundRegionInfoDirect(other, "norm", &offset, &shape, 0, &offset, &shape)};
  const msg::Digest128 claimed = toMessage(digestOf(sampleBindings()));
  other.Finish(msg::CreateBindingsDirect(other, &claimed, &locals, &bound));
  auto refused = bindingsFromMessage(*flatbuffers::GetRoot<msg::Bindings>(other.GetBufferPointer()));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, RegionError::InvalidBinding);
}

TEST(RegionMessage, ABoxWhoseListsDifferInLengthIsRefused) {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<std::int64_t> offset = {0, 0};
  const std::vector<std::int64_t> extent = {3};
  std::vector<flatbuffers::Offset<msg::Region>> regions = {msg::CreateRegionDirect(fbb, 0, &offset, &extent)};
  fbb.Finish(msg::CreateHoldingsDirect(fbb, nullptr, nullptr, &regions));
  auto decoded = holdingsFromMessage(*flatbuffers::GetRoot<msg::Holdings>(fbb.GetBufferPointer()));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().code, RegionError::RankMismatch);
  EXPECT_EQ(decoded.error().detail, "held region 0 has 2 offsets and 1 extents (at most 16 dimensions)");
}

}  // namespace
}  // namespace wsync::bus
