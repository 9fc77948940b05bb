// Manifests: validation names the offending tensor, digests identify content and order, the wire form round-trips
// byte for byte and a forged digest is caught; tensor names are 1 to kMaxTensorNameBytes of UTF-8 without control
// characters, shown escaped when refused.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/message.hpp"

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
      {{{std::string(kMaxTensorNameBytes + 1, 'n'), msg::DType::F32, {1}}},
       ManifestError::InvalidName,
       "has a name of 1025 bytes, over 1024"},
      {{{"w", msg::DType::F32, {1}}, {"w", msg::DType::F32, {2}}}, ManifestError::DuplicateName, "'w'"},
      {{{"odd", msg::DType::Unknown, {1}}}, ManifestError::UnknownDType, "'odd'"},
      {{{"deep", msg::DType::F32, std::vector<std::int64_t>(kMaxTensorRank + 1, 1)}},
       ManifestError::RankTooLarge,
       "'deep'"},
      {{{"neg", msg::DType::F32, {4, -1}}}, ManifestError::NegativeDimension, "[4, -1]"},
      {{{"huge", msg::DType::F64, {1LL << 40, 1LL << 40}}}, ManifestError::TooLarge, "'huge'"},
      {{{"a", msg::DType::U8, {kMaxManifestBytes / 2 + 1}}, {"b", msg::DType::U8, {kMaxManifestBytes / 2 + 1}}},
       ManifestError::TooLarge,
       "'b'"},
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

// `count` tensors whose names are `nameBytes` long, for the size of a manifest's control message.
std::vector<TensorSpec> longNamedTensors(std::size_t count, std::size_t nameBytes) {
  std::vector<TensorSpec> tensors;
  tensors.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::string name = "model.layers." + std::to_string(i) + ".";
    name.resize(nameBytes, 'w');
    tensors.push_back({std::move(name), msg::DType::BF16, {4}});
  }
  return tensors;
}

// A manifest travels in one control message. Names of 400 bytes: 74,500 of them fit (create measures the encoded
// form, as its estimate is over the limit) and a BeginUpdate with the longest label carries them within
// kMaxMessageBytes; 80,000 do not, and create says so instead of the round failing on the wire.
TEST(Manifest, WhatFitsInAControlMessageIsAcceptedAndWhatDoesNotIsRefusedNamed) {
  auto fits = Manifest::create(longNamedTensors(74'500, 400));
  ASSERT_TRUE(fits.has_value()) << fits.error().describe();
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const msg::Digest128 digest = toMessage(fits->digest());
  const auto manifest = fits->toMessage(fbb);
  const auto body = msg::CreateBeginUpdate(fbb, 1, fbb.CreateString(std::string(kMaxLabelBytes, 'l')), &digest,
                                           manifest, msg::ChannelKind::Shm, msg::PauseMode::Keep, fits->totalBytes());
  const auto bytes = builder.finish(body, EnvelopeStamp{~std::uint64_t{0}, ~std::uint64_t{0}});
  EXPECT_GT(bytes.size(), kMaxMessageBytes - (std::size_t{2} << 20)) << "not near the limit: the case tests nothing";
  ASSERT_LE(bytes.size(), kMaxMessageBytes);
  auto message = Message::decode(bytes);
  ASSERT_TRUE(message.has_value()) << toString(message.error());
  EXPECT_EQ(message->as<msg::BeginUpdate>()->manifest()->tensors()->size(), 74'500U);

  auto refused = Manifest::create(longNamedTensors(80'000, 400));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ManifestError::MessageTooLarge);
  const std::string detail = refused.error().describe();
  EXPECT_NE(detail.find("80000 tensors encode to"), std::string::npos) << detail;
  EXPECT_NE(detail.find("one control message"), std::string::npos) << detail;
  EXPECT_NE(detail.find("the longest tensor 'model.layers.0.www"), std::string::npos) << detail;
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

// --- tensor names -----------------------------------------------------------------------------------------------

using namespace std::string_literals;

// Each refused name with the exact detail: the name escaped (\xNN), the problem and where it is.
const std::vector<std::pair<std::string, std::string>>& refusedNames() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"nul\0inside"s, "tensor 'nul\\x00inside' has a NUL byte at offset 3"},
      {"\0lead"s, "tensor '\\x00lead' has a NUL byte at offset 0"},
      {"tab\there", "tensor 'tab\\x09here' has a control byte at offset 3"},
      {"line\nbreak", "tensor 'line\\x0abreak' has a control byte at offset 4"},
      {"del\x7f", "tensor 'del\\x7f' has a control byte at offset 3"},
      {"esc\x1b[31m", "tensor 'esc\\x1b[31m' has a control byte at offset 3"},
      {"caf\xe9.weight", "tensor 'caf\\xe9.weight' is not UTF-8 at offset 3"},
      {"over\xc0\xafong", "tensor 'over\\xc0\\xafong' is not UTF-8 at offset 4"},  // an overlong '/'
      {"cut\xe6\xa8", "tensor 'cut\\xe6\\xa8' is not UTF-8 at offset 3"},          // a truncated sequence
      {"", "a tensor has an empty name"},
  };
  return names;
}

TEST(TensorName, RefusesNulControlBytesAndInvalidUtf8) {
  for (const auto& [name, detail] : refusedNames()) {
    const auto valid = validateTensorName(name);
    ASSERT_FALSE(valid.has_value()) << detail;
    EXPECT_EQ(valid.error().code, ManifestError::InvalidName);
    EXPECT_EQ(valid.error().detail, detail);
    for (const char c : valid.error().detail) {
      EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f) << "a raw control byte in: " << detail;
    }
    // The manifest refuses it the same way, wherever it is in the list.
    auto manifest = Manifest::create({{"first", msg::DType::F32, {1}}, {name, msg::DType::F32, {1}}});
    ASSERT_FALSE(manifest.has_value());
    EXPECT_EQ(manifest.error().code, ManifestError::InvalidName);
    EXPECT_EQ(manifest.error().detail, detail);
  }
}

TEST(TensorName, AcceptsMultiByteUtf8AndTheLimit) {
  EXPECT_TRUE(validateTensorName("model.layers.0.self_attn.q_proj.weight").has_value());
  EXPECT_TRUE(validateTensorName("模型.层.0.权重").has_value());
  EXPECT_TRUE(validateTensorName("caf\xc3\xa9.\xf0\x9f\xa7\xa0.weight").has_value());  // U+00E9, U+1F9E0
  EXPECT_TRUE(validateTensorName(std::string(kMaxTensorNameBytes, 'n')).has_value());
  EXPECT_FALSE(validateTensorName(std::string(kMaxTensorNameBytes + 1, 'n')).has_value());
}

// The wire form holds exactly the bytes the digest covers: names are written with their length.
TEST(TensorName, WireFormKeepsNamesByteForByte) {
  const std::vector<TensorSpec> tensors = {{"模型.层.0.权重", msg::DType::BF16, {4, 4}},
                                           {"caf\xc3\xa9 au lait", msg::DType::F32, {}},
                                           {std::string(kMaxTensorNameBytes, 'z'), msg::DType::U8, {3}}};
  auto manifest = Manifest::create(tensors);
  ASSERT_TRUE(manifest.has_value()) << manifest.error().describe();
  MessageBuilder builder;
  auto message = Message::decode(builder.finish(manifest->toMessage(builder.fbb())));
  ASSERT_TRUE(message.has_value());
  const auto* entries = message->as<msg::Manifest>()->tensors();
  ASSERT_EQ(entries->size(), tensors.size());
  for (flatbuffers::uoffset_t i = 0; i < entries->size(); ++i) {
    EXPECT_EQ(entries->Get(i)->name()->str(), tensors[i].name);
  }
  auto back = Manifest::fromMessage(*message->as<msg::Manifest>());
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(back->tensors(), tensors);
  EXPECT_EQ(back->digest(), manifest->digest());
}

// A name with a NUL from the wire is refused as such, not taken with its NUL (the digest would cover it) and later
// cut by a C-string re-encoding that workers then see as a digest mismatch.
TEST(TensorName, NulInANameFromTheWireIsRefused) {
  MessageBuilder builder;
  auto& fbb = builder.fbb();
  const std::vector<std::int64_t> shape{2};
  std::vector<flatbuffers::Offset<msg::TensorInfo>> entries{
      msg::CreateTensorInfo(fbb, fbb.CreateString("nul\0inside"s), msg::DType::F32, fbb.CreateVector(shape))};
  const msg::Digest128 digest(0, 0);
  auto message = Message::decode(builder.finish(msg::CreateManifestDirect(fbb, &digest, &entries, 8)));
  ASSERT_TRUE(message.has_value());
  auto manifest = Manifest::fromMessage(*message->as<msg::Manifest>());
  ASSERT_FALSE(manifest.has_value());
  EXPECT_EQ(manifest.error().code, ManifestError::InvalidName);
  EXPECT_EQ(manifest.error().detail, "tensor 'nul\\x00inside' has a NUL byte at offset 3");
}

}  // namespace
}  // namespace wsync::bus
