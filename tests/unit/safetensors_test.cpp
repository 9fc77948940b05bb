// Safetensors files: what writeSafetensors writes reads back identically and byte-for-byte reproducibly, in the
// reference layout; every kind of malformed file is refused with an error that names the tensor or field.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/model_catalog.hpp"
#include "wsync/cli/safetensors.hpp"

namespace wsync::cli {
namespace {

// The catalog and the files speak in the bus's tensor specs, manifests and bucket plans.
using namespace wsync::bus;

namespace fs = std::filesystem;

std::uint64_t bytesOf(const TensorSpec& tensor) {
  std::uint64_t bytes = elementBytes(tensor.dtype);
  for (std::int64_t dim : tensor.shape) bytes *= static_cast<std::uint64_t>(dim);
  return bytes;
}

std::vector<char> readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A model's specs with deterministic content, and the spans writeSafetensors takes.
struct Checkpoint {
  std::vector<TensorSpec> tensors;
  std::vector<std::vector<std::byte>> content;

  explicit Checkpoint(std::vector<TensorSpec> specs, std::uint64_t seed = 17) : tensors(std::move(specs)) {
    for (std::uint32_t i = 0; i < tensors.size(); ++i) {
      content.emplace_back(bytesOf(tensors[i]));
      fillTensor(content.back(), seed, i);
    }
  }

  std::vector<std::span<const std::byte>> spans() const { return {content.begin(), content.end()}; }
};

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(::testing::TempDir()) / "wsync-safetensors-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
  }
  void TearDown() override { fs::remove_all(directory_); }

  fs::path file(const std::string& name) const { return directory_ / name; }

  // A file as a hostile or broken writer might leave it: `length` as the header length, then `header`, then
  // `dataBytes` bytes of data.
  fs::path writeRaw(const std::string& header, std::size_t dataBytes = 0, std::optional<std::uint64_t> length = {}) {
    const fs::path path = file("raw-" + std::to_string(rawFiles_++) + ".safetensors");
    std::ofstream out(path, std::ios::binary);
    std::uint64_t prefix = length.value_or(header.size());
    for (int i = 0; i < 8; ++i, prefix >>= 8) out.put(static_cast<char>(prefix & 0xFFU));
    out << header << std::string(dataBytes, '\x5a');
    return path;
  }

  std::vector<fs::path> directoryEntries() const {
    return {fs::directory_iterator(directory_), fs::directory_iterator()};
  }

  fs::path directory_;
  int rawFiles_ = 0;
};

const std::map<std::string, std::string> kMetadata{{"format", "pt"}, {"step", "42000"}, {"ünïcode", "✓"}};

TEST_F(Safetensors, RoundTripsSpecsBytesAndMetadata) {
  for (const char* model : {"tiny", "synthetic:100:4"}) {
    const Checkpoint checkpoint(*modelTensors(model));
    const fs::path path = file(std::string(model).substr(0, 4) + ".safetensors");
    auto written = writeSafetensors(path, checkpoint.tensors, checkpoint.spans(), kMetadata);
    ASSERT_TRUE(written.has_value()) << written.error().describe();

    auto opened = SafetensorsFile::open(path);
    ASSERT_TRUE(opened.has_value()) << opened.error().describe();
    EXPECT_EQ(opened->tensors(), checkpoint.tensors) << model;
    EXPECT_EQ(opened->metadata(), kMetadata);
    for (std::size_t i = 0; i < checkpoint.tensors.size(); ++i) {
      const auto bytes = opened->bytes(i);
      ASSERT_EQ(bytes.size(), checkpoint.content[i].size()) << checkpoint.tensors[i].name;
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), checkpoint.content[i].begin())) << checkpoint.tensors[i].name;
    }
    EXPECT_EQ(Manifest::create(opened->tensors())->digest(), Manifest::create(checkpoint.tensors)->digest());
  }
}

TEST_F(Safetensors, WritesTheReferenceLayout) {
  const Checkpoint checkpoint({{"a", msg::DType::F32, {2}}, {"b", msg::DType::I64, {}}});
  const fs::path path = file("layout.safetensors");
  ASSERT_TRUE(writeSafetensors(path, checkpoint.tensors, checkpoint.spans(), {{"format", "pt"}}).has_value());

  const std::vector<char> bytes = readFile(path);
  const std::string json = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  const std::size_t headerBytes = (json.size() + 7) / 8 * 8;
  ASSERT_EQ(bytes.size(), 8 + headerBytes + 16);
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(length, headerBytes);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(headerBytes));
  EXPECT_EQ(header, json + std::string(headerBytes - json.size(), ' '));
  EXPECT_TRUE(std::equal(checkpoint.content[0].begin(), checkpoint.content[0].end(),
                         reinterpret_cast<const std::byte*>(bytes.data()) + 8 + headerBytes));
}

TEST_F(Safetensors, RepeatWritesAreByteIdenticalAndLeaveNoTemporary) {
  const Checkpoint checkpoint(*modelTensors("tiny"));
  ASSERT_TRUE(writeSafetensors(file("one"), checkpoint.tensors, checkpoint.spans(), kMetadata).has_value());
  ASSERT_TRUE(writeSafetensors(file("two"), checkpoint.tensors, checkpoint.spans(), kMetadata).has_value());
  EXPECT_EQ(readFile(file("one")), readFile(file("two")));
  ASSERT_TRUE(writeSafetensors(file("two"), checkpoint.tensors, checkpoint.spans(), kMetadata).has_value());
  EXPECT_EQ(readFile(file("one")), readFile(file("two")));
  EXPECT_EQ(directoryEntries().size(), 2U);  // "one", "two" and no "*.tmp-<pid>"

  const Checkpoint other(*modelTensors("tiny"), 18);
  ASSERT_TRUE(writeSafetensors(file("two"), other.tensors, other.spans(), kMetadata).has_value());
  EXPECT_NE(readFile(file("one")), readFile(file("two")));
}

TEST_F(Safetensors, KeepsWriteOrderAndSortsForeignFilesByOffset) {
  // Zero-byte tensors share offsets with their neighbours; they come back where they were written.
  const Checkpoint checkpoint({{"z2", msg::DType::F16, {0}},
                               {"a", msg::DType::F32, {4}},
                               {"z1", msg::DType::BF16, {3, 0}},
                               {"z0", msg::DType::U8, {0}},
                               {"b", msg::DType::U8, {2}},
                               {"y", msg::DType::F64, {0}}});
  ASSERT_TRUE(writeSafetensors(file("zeros"), checkpoint.tensors, checkpoint.spans()).has_value());
  auto opened = SafetensorsFile::open(file("zeros"));
  ASSERT_TRUE(opened.has_value()) << opened.error().describe();
  EXPECT_EQ(opened->tensors(), checkpoint.tensors);
  EXPECT_TRUE(opened->metadata().empty());

  // A header that lists tensors in another order than their bytes, with a gap, trailing bytes and a field the
  // format does not define (ignored, as the reference reader does).
  auto foreign =
      SafetensorsFile::open(writeRaw(R"({"late":{"dtype":"U8","shape":[2],"data_offsets":[10,12],"note":"x"},)"
                                     R"("early":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})",
                                     16));
  ASSERT_TRUE(foreign.has_value()) << foreign.error().describe();
  ASSERT_EQ(foreign->tensors().size(), 2U);
  EXPECT_EQ(foreign->tensors()[0], (TensorSpec{"early", msg::DType::U16, {2}}));
  EXPECT_EQ(foreign->tensors()[1], (TensorSpec{"late", msg::DType::U8, {2}}));
  EXPECT_EQ(foreign->bytes(1).size(), 2U);
}

TEST_F(Safetensors, MovesKeepTheMapping) {
  const Checkpoint checkpoint(*modelTensors("tiny"));
  ASSERT_TRUE(writeSafetensors(file("m"), checkpoint.tensors, checkpoint.spans()).has_value());
  auto opened = SafetensorsFile::open(file("m"));
  ASSERT_TRUE(opened.has_value());
  SafetensorsFile moved(std::move(*opened));
  auto another = SafetensorsFile::open(file("m"));
  ASSERT_TRUE(another.has_value());
  *another = std::move(moved);
  EXPECT_EQ(another->tensors(), checkpoint.tensors);
  EXPECT_TRUE(std::equal(another->bytes(0).begin(), another->bytes(0).end(), checkpoint.content[0].begin()));
}

struct MalformedCase {
  const char* what;
  std::string header;
  std::size_t dataBytes;
  SafetensorsError error;
  std::string mentions;
};

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

TEST_F(Safetensors, RefusesMalformedHeadersNamingTheTensor) {
  const std::string good = entry(R"("F32")", "[2]", "[0,8]");
  const std::vector<MalformedCase> cases = {
      {"not JSON", "{\"w\": nope}", 0, SafetensorsError::HeaderNotJson, "parse error"},
      {"truncated JSON", R"({"w":)" + good.substr(0, 10), 0, SafetensorsError::HeaderNotJson, "parse error"},
      {"trailing garbage", R"({"w":)" + good + "} x", 8, SafetensorsError::HeaderNotJson, "parse error"},
      {"an array", "[1, 2]", 0, SafetensorsError::HeaderNotObject, "array"},
      {"deeply nested", std::string(100'000, '[') + std::string(100'000, ']'), 0, SafetensorsError::HeaderNotObject,
       "array"},
      {"a string", R"("w")", 0, SafetensorsError::HeaderNotObject, "string"},
      {"metadata not an object", R"({"__metadata__":["a"]})", 0, SafetensorsError::InvalidMetadata, "__metadata__"},
      {"metadata not strings", R"({"__metadata__":{"step":42}})", 0, SafetensorsError::InvalidMetadata, "'step'"},
      {"metadata too deep", R"({"__metadata__":{"k":[[1]]}})", 0, SafetensorsError::InvalidMetadata, "'k'"},
      {"metadata nested object", R"({"__metadata__":{"k":{"a":"b"}}})", 0, SafetensorsError::InvalidMetadata, "'k'"},
      {"entry not an object", R"({"w":5})", 0, SafetensorsError::InvalidEntry, "tensor 'w'"},
      {"entry null", R"({"w":null})", 0, SafetensorsError::InvalidEntry, "tensor 'w'"},
      {"entry a list", R"({"w":[1]})", 0, SafetensorsError::InvalidEntry, "tensor 'w'"},
      {"name twice", R"({"w":)" + good + R"(,"w":)" + good + "}", 8, SafetensorsError::InvalidEntry,
       "tensor 'w' appears twice"},
      {"field twice", R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8,
       SafetensorsError::InvalidEntry, "tensor 'w' has the field 'dtype' twice"},
      {"unknown field holding an object", R"({"w":{"dtype":"F32","x":{},"shape":[2],"data_offsets":[0,8]}})", 8,
       SafetensorsError::InvalidEntry, "tensor 'w' field 'x'"},
      {"no dtype", R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8, SafetensorsError::InvalidEntry,
       "tensor 'w' has no 'dtype'"},
      {"no shape", R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8, SafetensorsError::InvalidEntry,
       "tensor 'w' has no 'shape'"},
      {"no data_offsets", R"({"w":{"dtype":"F32","shape":[2]}})", 8, SafetensorsError::InvalidEntry,
       "tensor 'w' has no 'data_offsets'"},
      {"empty name", R"({"":)" + good + "}", 8, SafetensorsError::InvalidEntry, "empty name"},
      {"unknown dtype", R"({"w":)" + entry(R"("F17")", "[2]", "[0,8]") + "}", 8, SafetensorsError::UnknownDType,
       "tensor 'w' has dtype \"F17\""},
      {"lower-case dtype", R"({"w":)" + entry(R"("f32")", "[2]", "[0,8]") + "}", 8, SafetensorsError::UnknownDType,
       "tensor 'w'"},
      {"dtype not a string", R"({"w":)" + entry("4", "[2]", "[0,8]") + "}", 8, SafetensorsError::UnknownDType,
       "tensor 'w'"},
      {"shape not a list", R"({"w":)" + entry(R"("F32")", R"("2")", "[0,8]") + "}", 8, SafetensorsError::InvalidShape,
       "tensor 'w'"},
      {"negative dimension", R"({"w":)" + entry(R"("F32")", "[2,-1]", "[0,8]") + "}", 8, SafetensorsError::InvalidShape,
       "tensor 'w' has shape entry -1"},
      {"fractional dimension", R"({"w":)" + entry(R"("F32")", "[2.5]", "[0,8]") + "}", 8,
       SafetensorsError::InvalidShape, "tensor 'w'"},
      {"dimension past int64", R"({"w":)" + entry(R"("U8")", "[9223372036854775808]", "[0,8]") + "}", 8,
       SafetensorsError::InvalidShape, "tensor 'w'"},
      {"too many bytes", R"({"w":)" + entry(R"("F64")", "[4294967296,4294967296]", "[0,8]") + "}", 8,
       SafetensorsError::InvalidShape, "tensor 'w'"},
      {"seventeen dimensions", R"({"w":)" + entry(R"("U8")", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[0,1]") + "}", 8,
       SafetensorsError::InvalidShape, "tensor 'w'"},
      {"nested shape", R"({"w":)" + entry(R"("U8")", "[[1]]", "[0,1]") + "}", 8, SafetensorsError::InvalidShape,
       "tensor 'w'"},
      {"deeply nested shape",
       R"({"w":)" + entry(R"("U8")", std::string(100'000, '[') + std::string(100'000, ']'), "[0,1]") + "}", 8,
       SafetensorsError::InvalidShape, "tensor 'w'"},
      {"one offset", R"({"w":)" + entry(R"("F32")", "[2]", "[8]") + "}", 8, SafetensorsError::InvalidOffsets,
       "tensor 'w'"},
      {"offsets reversed", R"({"w":)" + entry(R"("F32")", "[2]", "[8,0]") + "}", 8, SafetensorsError::InvalidOffsets,
       "tensor 'w'"},
      {"offsets as strings", R"({"w":)" + entry(R"("F32")", "[2]", R"(["0","8"])") + "}", 8,
       SafetensorsError::InvalidOffsets, "tensor 'w'"},
      {"negative offset", R"({"w":)" + entry(R"("F32")", "[2]", "[-8,0]") + "}", 8, SafetensorsError::InvalidOffsets,
       "tensor 'w'"},
      {"size differs from shape", R"({"w":)" + entry(R"("F32")", "[3]", "[0,8]") + "}", 16,
       SafetensorsError::InvalidOffsets, "tensor 'w' has data_offsets [0, 8] (8 bytes), but F32 [3] is 12 bytes"},
      {"past the data", R"({"w":)" + good + "}", 4, SafetensorsError::OutOfBounds, "tensor 'w'"},
      {"far past the data", R"({"w":)" + entry(R"("U8")", "[8]", "[18446744073709551600,18446744073709551608]") + "}",
       4, SafetensorsError::OutOfBounds, "tensor 'w'"},
      {"overlap", R"({"a":)" + good + R"(,"b":)" + entry(R"("F32")", "[2]", "[4,12]") + "}", 12,
       SafetensorsError::Overlap, "tensor 'a' [0, 8) and tensor 'b' [4, 12)"},
      {"overlap inside",
       R"({"big":)" + entry(R"("U8")", "[16]", "[0,16]") + R"(,"x":)" + good + R"(,"y":)" +
           entry(R"("U8")", "[2]", "[10,12]") + "}",
       16, SafetensorsError::Overlap, "tensor 'big'"},
      {"same bytes", R"({"a":)" + good + R"(,"b":)" + good + "}", 8, SafetensorsError::Overlap, "tensor 'b'"},
  };
  for (const MalformedCase& c : cases) {
    auto opened = SafetensorsFile::open(writeRaw(c.header, c.dataBytes));
    ASSERT_FALSE(opened.has_value()) << c.what;
    EXPECT_EQ(opened.error().code, c.error) << c.what << ": " << opened.error().describe();
    EXPECT_NE(opened.error().detail.find(c.mentions), std::string::npos) << c.what << ": " << opened.error().describe();
    EXPECT_NE(opened.error().detail.find("raw-"), std::string::npos) << "names the file: " << opened.error().describe();
  }
}

TEST_F(Safetensors, RefusesShortAndOversizedFiles) {
  {
    std::ofstream(file("three")) << "abc";
    auto opened = SafetensorsFile::open(file("three"));
    ASSERT_FALSE(opened.has_value());
    EXPECT_EQ(opened.error().code, SafetensorsError::TooShort);
    EXPECT_NE(opened.error().detail.find("3 bytes"), std::string::npos) << opened.error().describe();
  }
  {
    auto opened = SafetensorsFile::open(writeRaw("{}", 0, 1000));
    ASSERT_FALSE(opened.has_value());
    EXPECT_EQ(opened.error().code, SafetensorsError::TooShort);
    EXPECT_NE(opened.error().detail.find("claims 1000 bytes"), std::string::npos) << opened.error().describe();
  }
  {
    auto opened = SafetensorsFile::open(writeRaw("{}", 0, kMaxSafetensorsHeaderBytes + 1));
    ASSERT_FALSE(opened.has_value());
    EXPECT_EQ(opened.error().code, SafetensorsError::HeaderTooLarge);
    EXPECT_NE(opened.error().detail.find(std::to_string(kMaxSafetensorsHeaderBytes + 1)), std::string::npos)
        << opened.error().describe();
  }
  {
    auto opened = SafetensorsFile::open(writeRaw("{}", 0, UINT64_MAX));
    ASSERT_FALSE(opened.has_value());
    EXPECT_EQ(opened.error().code, SafetensorsError::HeaderTooLarge);
  }
  {
    auto opened = SafetensorsFile::open(file("missing"));
    ASSERT_FALSE(opened.has_value());
    EXPECT_EQ(opened.error().code, SafetensorsError::OpenFailed);
    EXPECT_NE(opened.error().detail.find("missing"), std::string::npos) << opened.error().describe();
  }
  {
    auto opened = SafetensorsFile::open(directory_);
    ASSERT_FALSE(opened.has_value());
    EXPECT_EQ(opened.error().code, SafetensorsError::OpenFailed);
    EXPECT_NE(opened.error().detail.find("not a regular file"), std::string::npos) << opened.error().describe();
  }
  {
    // An empty header is a valid file with no tensors.
    auto opened = SafetensorsFile::open(writeRaw("{}        ", 0));
    ASSERT_TRUE(opened.has_value()) << opened.error().describe();
    EXPECT_TRUE(opened->tensors().empty());
  }
}

TEST_F(Safetensors, RefusesMoreTensorsThanAManifestHolds) {
  std::string header = "{";
  for (std::size_t i = 0; i <= kMaxTensors; ++i) {
    header += (i == 0 ? "\"t" : ",\"t") + std::to_string(i) + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  }
  header += "}";
  auto opened = SafetensorsFile::open(writeRaw(header));
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error().code, SafetensorsError::TooManyTensors);
  EXPECT_NE(opened.error().detail.find("tensor 't" + std::to_string(kMaxTensors) + "' is one past the " +
                                       std::to_string(kMaxTensors)),
            std::string::npos)
      << opened.error().describe();
}

TEST_F(Safetensors, WriterRefusesInconsistentInput) {
  const Checkpoint checkpoint({{"w", msg::DType::F32, {2}}, {"v", msg::DType::U8, {3}}});
  auto spans = checkpoint.spans();
  struct Case {
    const char* what;
    std::vector<TensorSpec> tensors;
    std::vector<std::span<const std::byte>> data;
    SafetensorsError error;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {"short data",
       checkpoint.tensors,
       {spans[0].first(7), spans[1]},
       SafetensorsError::SizeMismatch,
       "tensor 'w' is F32 [2], 8 bytes, but its data has 7"},
      {"long data", checkpoint.tensors, {spans[0], spans[0]}, SafetensorsError::SizeMismatch, "tensor 'v'"},
      {"missing span", checkpoint.tensors, {spans[0]}, SafetensorsError::SizeMismatch, "2 tensors but 1 data span"},
      {"duplicate",
       {{"w", msg::DType::F32, {2}}, {"w", msg::DType::U8, {3}}},
       spans,
       SafetensorsError::InvalidEntry,
       "tensor 'w'"},
      {"reserved name",
       {{"__metadata__", msg::DType::F32, {2}}, {"v", msg::DType::U8, {3}}},
       spans,
       SafetensorsError::InvalidEntry,
       "'__metadata__'"},
      {"unknown dtype",
       {{"w", msg::DType::Unknown, {2}}, {"v", msg::DType::U8, {3}}},
       spans,
       SafetensorsError::UnknownDType,
       "tensor 'w'"},
      {"negative dimension",
       {{"w", msg::DType::F32, {-2}}, {"v", msg::DType::U8, {3}}},
       spans,
       SafetensorsError::InvalidShape,
       "tensor 'w'"},
      {"not UTF-8",
       {{"w\xff", msg::DType::F32, {2}}, {"v", msg::DType::U8, {3}}},
       spans,
       SafetensorsError::InvalidEntry,
       "UTF-8"},
  };
  ASSERT_TRUE(writeSafetensors(file("kept"), checkpoint.tensors, spans).has_value());
  const auto before = readFile(file("kept"));
  for (const Case& c : cases) {
    auto written = writeSafetensors(file("kept"), c.tensors, c.data);
    ASSERT_FALSE(written.has_value()) << c.what;
    EXPECT_EQ(written.error().code, c.error) << c.what << ": " << written.error().describe();
    EXPECT_NE(written.error().detail.find(c.mentions), std::string::npos)
        << c.what << ": " << written.error().describe();
  }
  EXPECT_EQ(readFile(file("kept")), before);  // a refused write leaves the old file as it was
  EXPECT_EQ(directoryEntries().size(), 1U);

  auto unwritable = writeSafetensors(directory_ / "no-such-folder" / "x", checkpoint.tensors, spans);
  ASSERT_FALSE(unwritable.has_value());
  EXPECT_EQ(unwritable.error().code, SafetensorsError::WriteFailed);
  EXPECT_NE(unwritable.error().detail.find("no-such-folder"), std::string::npos) << unwritable.error().describe();
}

}  // namespace
}  // namespace wsync::cli
