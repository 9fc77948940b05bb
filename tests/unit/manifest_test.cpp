// Manifests: validation names the offending tensor, digests identify content and order, the wire form round-trips
// and a forged digest is caught.
#include <gtest/gtest.h>

#include "wsync/bus/dtype.hpp"
#include "wsync/bus/manifest.hpp"
#include "wsync/bus/message.hpp"

namespace wsync::bus {
namespace {

std::vector<TensorSpec> smallModel() {
  return {{"embed.weight", msg::DType::BF16, {50272, 768}},
          {"layers.0.norm.bias", msg::DType::F32, {768}},
          {"step", msg::DType::I64, {}},
          {"empty", msg::DType::F16, {0, 8}}};
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(elementBytes(msg::DType::BF16), 2U);
  EXPECT_EQ(elementBytes(msg::DType::F8E4M3), 1U);
  EXPECT_EQ(elementBytes(msg::DType::U64), 8U);
  EXPECT_EQ(elementBytes(msg::DType::Unknown), 0U);
  EXPECT_EQ(elementBytes(static_cast<msg::DType>(200)), 0U);
  EXPECT_EQ(safetensorsName(msg::DType::F8E5M2), "F8_E5M2");
  EXPECT_EQ(dtypeFromSafetensorsName("BF16"), msg::DType::BF16);
  EXPECT_FALSE(dtypeFromSafetensorsName("bf16").has_value());
  for (int value = 1; value <= static_cast<int>(msg::DType::MAX); ++value) {
    const auto dtype = static_cast<msg::DType>(value);
    EXPECT_EQ(dtypeFromSafetensorsName(safetensorsName(dtype)), dtype) << value;
  }
}

TEST(Manifest, CountsBytes) {
  auto manifest = Manifest::create(smallModel());
  ASSERT_TRUE(manifest.has_value()) << manifest.error().describe();
  EXPECT_EQ(manifest->size(), 4U);
  EXPECT_EQ(manifest->tensorBytes(0), 50272U * 768U * 2U);
  EXPECT_EQ(manifest->tensorBytes(2), 8U);  // a scalar has one element
  EXPECT_EQ(manifest->tensorBytes(3), 0U);
  EXPECT_EQ(manifest->totalBytes(), 50272U * 768U * 2U + 768U * 4U + 8U);
}

TEST(Manifest, DigestFollowsContentAndOrder) {
  const Digest base = Manifest::create(smallModel())->digest();
  EXPECT_EQ(Manifest::create(smallModel())->digest(), base);

  auto reordered = smallModel();
  std::swap(reordered[0], reordered[1]);
  EXPECT_NE(Manifest::create(reordered)->digest(), base);
  auto reshaped = smallModel();
  reshaped[1].shape = {24, 32};  // same byte count, other shape
  EXPECT_NE(Manifest::create(reshaped)->digest(), base);
  auto retyped = smallModel();
  retyped[0].dtype = msg::DType::F16;  // same size, other dtype
  EXPECT_NE(Manifest::create(retyped)->digest(), base);
  // Name/shape boundaries are length-prefixed: moving a character between fields changes the digest.
  EXPECT_NE(Manifest::create({{"ab", msg::DType::U8, {1}}, {"c", msg::DType::U8, {1}}})->digest(),
            Manifest::create({{"a", msg::DType::U8, {1}}, {"bc", msg::DType::U8, {1}}})->digest());
}

TEST(Manifest, RefusalsNameTheTensor) {
  struct Case {
    std::vector<TensorSpec> tensors;
    ManifestError error;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {{}, ManifestError::Empty, "at least one"},
      {{{"", msg::DType::F32, {1}}}, ManifestError::InvalidName, "empty name"},
      {{{std::string(kMaxTensorNameBytes + 1, 'n'), msg::DType::F32, {1}}}, ManifestError::InvalidName, "nnnn"},
      {{{"w", msg::DType::F32, {1}}, {"w", msg::DType::F32, {2}}}, ManifestError::DuplicateName, "'w'"},
      {{{"odd", msg::DType::Unknown, {1}}}, ManifestError::UnknownDType, "'odd'"},
      {{{"deep", msg::DType::F32, std::vector<std::int64_t>(kMaxTensorRank + 1, 1)}}, ManifestError::RankTooLarge,
       "'deep'"},
      {{{"neg", msg::DType::F32, {4, -1}}}, ManifestError::NegativeDimension, "[4, -1]"},
      {{{"huge", msg::DType::F64, {1LL << 40, 1LL << 40}}}, ManifestError::TooLarge, "'huge'"},
      {{{"a", msg::DType::U8, {kMaxManifestBytes / 2 + 1}}, {"b", msg::DType::U8, {kMaxManifestBytes / 2 + 1}}},
       ManifestError::TooLarge, "'b'"},
  };
  for (const Case& c : cases) {
    auto manifest = Manifest::create(c.tensors);
    ASSERT_FALSE(manifest.has_value()) << c.mentions;
    EXPECT_EQ(manifest.error().code, c.error) << manifest.error().describe();
    EXPECT_NE(manifest.error().detail.find(c.mentions), std::string::npos) << manifest.error().describe();
  }
}

TEST(Manifest, WireFormRoundTrips) {
  auto manifest = Manifest::create(smallModel());
  ASSERT_TRUE(manifest.has_value());
  MessageBuilder builder;
  auto bytes = builder.finish(manifest->toMessage(builder.fbb()));
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message.has_value());
  auto back = Manifest::fromMessage(*message->as<msg::Manifest>());
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(back->tensors(), manifest->tensors());
  EXPECT_EQ(back->digest(), manifest->digest());
  EXPECT_EQ(message->as<msg::Manifest>()->total_bytes(), manifest->totalBytes());
}

TEST(Manifest, ForgedDigestIsCaught) {
  auto manifest = Manifest::create(smallModel());
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  // The tensors of one manifest under the digest of another: a worker must not trust a cached check for it.
  const msg::Digest128 forged(manifest->digest().lo ^ 1U, manifest->digest().hi);
  std::vector<flatbuffers::Offset<msg::TensorInfo>> entries;
  for (const TensorSpec& tensor : manifest->tensors()) {
    entries.push_back(msg::CreateTensorInfoDirect(fbb, tensor.name.c_str(), tensor.dtype, &tensor.shape));
  }
  auto message = Message::decode(builder.finish(msg::CreateManifestDirect(fbb, &forged, &entries, 0)));
  ASSERT_TRUE(message.has_value());
  auto back = Manifest::fromMessage(*message->as<msg::Manifest>());
  ASSERT_FALSE(back.has_value());
  EXPECT_EQ(back.error().code, ManifestError::DigestMismatch);
}

TEST(Manifest, InvalidEntriesFromTheWireAreRefused) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const std::vector<std::int64_t> shape{2, -3};
  std::vector<flatbuffers::Offset<msg::TensorInfo>> entries{
      msg::CreateTensorInfoDirect(fbb, "bad", msg::DType::F32, &shape)};
  const msg::Digest128 digest(0, 0);
  auto message = Message::decode(builder.finish(msg::CreateManifestDirect(fbb, &digest, &entries, 0)));
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(Manifest::fromMessage(*message->as<msg::Manifest>()).error().code, ManifestError::NegativeDimension);
}

}  // namespace
}  // namespace wsync::bus
