// Writes the seeds of corpus/manifest and corpus/safetensors (run by hand when the formats change; never by the
// tests): valid inputs of each shape the readers meet, and `refused_*` inputs that must be refused for the reason
// in their name, which this program checks before writing them.
//
//   build/tests/fuzz/wsync_make_file_corpora tests/fuzz/corpus
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/model_catalog.hpp"
#include "wsync/cli/safetensors.hpp"

namespace {

namespace bus = wsync::bus;
namespace cli = wsync::cli;
namespace msg = wsync::msg;
namespace fs = std::filesystem;

using Bytes = std::vector<std::uint8_t>;

bool writeFile(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// ---- manifests -------------------------------------------------------------------------------------------------

struct RawTensor {
  std::string name;
  msg::DType dtype;
  std::vector<std::int64_t> shape;
};

// A Manifest table as the buffer's root, built without Manifest::create's checks.
Bytes rawManifest(const std::vector<RawTensor>& tensors, std::optional<bus::Digest> digest = std::nullopt) {
  std::vector<bus::TensorSpec> specs;
  for (const RawTensor& tensor : tensors) specs.push_back({tensor.name, tensor.dtype, tensor.shape});
  if (!digest) {
    auto valid = bus::Manifest::create(specs);
    digest = valid ? valid->digest() : bus::Digest{1, 2};
  }
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<msg::TensorInfo>> entries;
  for (const RawTensor& tensor : tensors) {
    // With its length: a name with a NUL inside must reach the reader whole.
    const auto name = fbb.CreateString(tensor.name);
    const auto shape = fbb.CreateVector(tensor.shape);
    entries.push_back(msg::CreateTensorInfo(fbb, name, tensor.dtype, shape));
  }
  const msg::Digest128 wire = bus::toMessage(*digest);
  fbb.Finish(msg::CreateManifestDirect(fbb, &wire, &entries, 0));
  return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

Bytes catalogManifest(const char* model) {
  auto manifest = bus::Manifest::create(*cli::modelTensors(model));
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(manifest->toMessage(fbb));
  return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

std::optional<bus::ManifestError> manifestVerdict(const Bytes& bytes) {
  const auto manifest = bus::Manifest::fromMessage(*flatbuffers::GetRoot<msg::Manifest>(bytes.data()));
  if (manifest) return std::nullopt;
  return manifest.error().code;
}

// ---- safetensors -----------------------------------------------------------------------------------------------

// An 8-byte little-endian header length, the header, then `data`.
Bytes rawSafetensors(const std::string& header, const Bytes& data) {
  Bytes out(8);
  const std::uint64_t length = header.size();
  for (std::size_t index = 0; index < 8; ++index) out[index] = static_cast<std::uint8_t>(length >> (8 * index));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::optional<cli::SafetensorsError> safetensorsVerdict(const fs::path& path) {
  auto file = cli::SafetensorsFile::open(path);
  if (file) return std::nullopt;
  return file.error().code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT (writes CORPUS_ROOT/manifest and CORPUS_ROOT/safetensors)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  int failures = 0;
  std::size_t written = 0;

  const fs::path manifests = root / "manifest";
  fs::create_directories(manifests);
  struct ManifestSeed {
    const char* name;
    Bytes bytes;
    std::optional<bus::ManifestError> expected;
  };
  const std::int64_t big = std::int64_t{1} << 40;
  std::vector<ManifestSeed> manifestSeeds{
      {"tiny", catalogManifest("tiny"), std::nullopt},
      {"opt_125m", catalogManifest("opt-125m"), std::nullopt},
      {"scalar_and_empty", rawManifest({{"s", msg::DType::F32, {}}, {"z", msg::DType::BF16, {0, 7}}}), std::nullopt},
      {"refused_empty", rawManifest({}), bus::ManifestError::Empty},
      {"refused_duplicate_name", rawManifest({{"w", msg::DType::F32, {2}}, {"w", msg::DType::F16, {2}}}),
       bus::ManifestError::DuplicateName},
      {"refused_unknown_dtype", rawManifest({{"w", msg::DType::Unknown, {2}}}), bus::ManifestError::UnknownDType},
      {"refused_negative_dimension", rawManifest({{"w", msg::DType::F32, {4, -1}}}),
       bus::ManifestError::NegativeDimension},
      {"refused_rank_too_large", rawManifest({{"w", msg::DType::F32, std::vector<std::int64_t>(17, 1)}}),
       bus::ManifestError::RankTooLarge},
      {"refused_too_large", rawManifest({{"w", msg::DType::F32, {big, big}}}), bus::ManifestError::TooLarge},
      {"refused_name_too_long", rawManifest({{std::string(1025, 'n'), msg::DType::F32, {1}}}),
       bus::ManifestError::InvalidName},
      {"refused_name_with_nul", rawManifest({{std::string("nul\0inside", 10), msg::DType::F32, {1}}}),
       bus::ManifestError::InvalidName},
      {"refused_name_with_control_byte", rawManifest({{"line\nbreak", msg::DType::F32, {1}}}),
       bus::ManifestError::InvalidName},
      {"refused_name_not_utf8", rawManifest({{"caf\xe9", msg::DType::F32, {1}}}), bus::ManifestError::InvalidName},
      {"refused_digest_mismatch", rawManifest({{"w", msg::DType::F32, {2}}}, bus::Digest{7, 7}),
       bus::ManifestError::DigestMismatch},
  };
  for (const ManifestSeed& seed : manifestSeeds) {
    const auto verdict = manifestVerdict(seed.bytes);
    if (verdict != seed.expected) {
      std::fprintf(stderr, "make_file_corpora: manifest seed %s: got %s\n", seed.name,
                   verdict ? std::string(toString(*verdict)).c_str() : "accepted");
      ++failures;
      continue;
    }
    if (!writeFile(manifests / (std::string(seed.name) + ".fb"), seed.bytes)) {
      ++failures;
      continue;
    }
    ++written;
  }

  const fs::path checkpoints = root / "safetensors";
  fs::create_directories(checkpoints);
  {
    // A real checkpoint as writeSafetensors makes them: the tiny model, with metadata.
    const auto specs = *cli::modelTensors("tiny");
    auto manifest = bus::Manifest::create(specs);
    std::vector<std::vector<std::byte>> buffers;
    std::vector<std::span<const std::byte>> views;
    for (std::size_t index = 0; index < specs.size(); ++index) {
      buffers.emplace_back(manifest->tensorBytes(index));
      cli::fillTensor(buffers.back(), 1, static_cast<std::uint32_t>(index));
    }
    for (const auto& buffer : buffers) views.emplace_back(buffer);
    const fs::path path = checkpoints / "tiny.safetensors";
    if (!cli::writeSafetensors(path, specs, views, {{"wsync_version", "3"}}) || safetensorsVerdict(path)) {
      std::fprintf(stderr, "make_file_corpora: tiny.safetensors does not read back\n");
      ++failures;
    } else {
      ++written;
    }
  }
  struct FileSeed {
    const char* name;
    Bytes bytes;
    std::optional<cli::SafetensorsError> expected;
  };
  const Bytes eight(8, 0x11);
  const Bytes sixteen(16, 0x22);
  std::vector<FileSeed> fileSeeds{
      {"two_tensors_with_a_gap",
       rawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})",
                      Bytes(24, 0x33)),
       std::nullopt},
      {"refused_too_short", Bytes{1, 2, 3}, cli::SafetensorsError::TooShort},
      // The length prefix announces 255 bytes of header; 2 follow.
      {"refused_header_past_the_end", Bytes{0xff, 0, 0, 0, 0, 0, 0, 0, '{', '}'}, cli::SafetensorsError::TooShort},
      {"refused_not_json", rawSafetensors("{\"a\":", eight), cli::SafetensorsError::HeaderNotJson},
      {"refused_not_an_object", rawSafetensors("[1,2]", eight), cli::SafetensorsError::HeaderNotObject},
      {"refused_unknown_dtype", rawSafetensors(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight),
       cli::SafetensorsError::UnknownDType},
      {"refused_negative_shape", rawSafetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       cli::SafetensorsError::InvalidShape},
      {"refused_offsets_not_the_byte_count",
       rawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", eight),
       cli::SafetensorsError::InvalidOffsets},
      {"refused_out_of_bounds", rawSafetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
       cli::SafetensorsError::OutOfBounds},
      {"refused_overlap",
       rawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      sixteen),
       cli::SafetensorsError::Overlap},
      {"refused_bad_metadata", rawSafetensors(R"({"__metadata__":{"k":1}})", {}),
       cli::SafetensorsError::InvalidMetadata},
  };
  for (const FileSeed& seed : fileSeeds) {
    const fs::path path = checkpoints / (std::string(seed.name) + ".safetensors");
    if (!writeFile(path, seed.bytes)) {
      ++failures;
      continue;
    }
    const auto verdict = safetensorsVerdict(path);
    if (verdict != seed.expected) {
      std::fprintf(stderr, "make_file_corpora: safetensors seed %s: got %s\n", seed.name,
                   verdict ? std::string(toString(*verdict)).c_str() : "accepted");
      fs::remove(path);
      ++failures;
      continue;
    }
    ++written;
  }
  std::printf("make_file_corpora: wrote %zu seeds under %s\n", written, root.c_str());
  return failures == 0 ? 0 : 1;
}
