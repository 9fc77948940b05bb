#include "weight_dumps.hpp"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/cli/safetensors.hpp"

namespace wsync::test {

// Names this many differing tensors at most: a failure at 100,000 tensors should stay readable.
constexpr std::size_t kNamedDifferences = 5;

void expectSameWeights(const std::string& expectedPath, const std::string& actualPath, std::uint64_t version) {
  auto expected = cli::SafetensorsFile::open(expectedPath);
  ASSERT_TRUE(expected) << expected.error().describe();
  auto actual = cli::SafetensorsFile::open(actualPath);
  ASSERT_TRUE(actual) << actual.error().describe();
  ASSERT_EQ(actual->tensors(), expected->tensors()) << actualPath;
  std::vector<std::string> differing;
  for (std::size_t index = 0; index < expected->tensors().size(); ++index) {
    const auto want = expected->bytes(index);
    const auto have = actual->bytes(index);
    if (want.size() != have.size() || std::memcmp(want.data(), have.data(), want.size()) != 0) {
      differing.push_back(expected->tensors()[index].name);
    }
  }
  std::string named;
  for (std::size_t i = 0; i < differing.size() && i < kNamedDifferences; ++i) named += " '" + differing[i] + "'";
  EXPECT_TRUE(differing.empty()) << actualPath << ": " << differing.size() << " tensors differ from " << expectedPath
                                 << ", among them" << named;
  const auto tag = actual->metadata().find("wsync_version");
  ASSERT_NE(tag, actual->metadata().end()) << actualPath << " has no wsync_version";
  EXPECT_EQ(tag->second, std::to_string(version)) << actualPath;
}

void expectSlicedWeights(const std::string& expectedPath, const std::string& actualPath, std::uint64_t version,
                         cli::Part part) {
  auto expected = cli::SafetensorsFile::open(expectedPath);
  ASSERT_TRUE(expected) << expected.error().describe();
  auto actual = cli::SafetensorsFile::open(actualPath);
  ASSERT_TRUE(actual) << actual.error().describe();
  const auto slices = cli::columnSlices(expected->tensors(), part);
  std::vector<bus::TensorSpec> locals;
  for (const auto& slice : slices) locals.push_back(slice.local);
  ASSERT_EQ(actual->tensors(), locals) << actualPath;
  std::vector<std::string> differing;
  std::size_t sliced = 0;
  for (std::size_t index = 0; index < slices.size(); ++index) {
    const bus::TensorSpec& tensor = expected->tensors()[index];
    const auto whole = expected->bytes(index);
    // The slice's bytes in row-major order of its box: what the worker's local tensor must hold.
    std::vector<std::byte> want;
    for (const bus::ByteRun& run : bus::runsOf(tensor.shape, slices[index].region, bus::elementBytes(tensor.dtype))) {
      want.insert(want.end(), whole.begin() + static_cast<std::ptrdiff_t>(run.offset),
                  whole.begin() + static_cast<std::ptrdiff_t>(run.offset + run.bytes));
    }
    const auto have = actual->bytes(index);
    // An empty slice has no data pointer to compare (memcmp takes none, even for 0 bytes).
    if (want.size() != have.size() || (!want.empty() && std::memcmp(want.data(), have.data(), want.size()) != 0)) {
      differing.push_back(tensor.name);
    }
    if (slices[index].sliced) ++sliced;
  }
  EXPECT_GT(sliced, 0u) << "the model has no tensor to slice: the test would prove nothing";
  std::string named;
  for (std::size_t i = 0; i < differing.size() && i < kNamedDifferences; ++i) named += " '" + differing[i] + "'";
  EXPECT_TRUE(differing.empty()) << actualPath << ": " << differing.size() << " tensors differ from their slices of "
                                 << expectedPath << ", among them" << named;
  const auto tag = actual->metadata().find("wsync_version");
  ASSERT_NE(tag, actual->metadata().end()) << actualPath << " has no wsync_version";
  EXPECT_EQ(tag->second, std::to_string(version)) << actualPath;
}

}  // namespace wsync::test
