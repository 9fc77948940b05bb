#include "weight_dumps.hpp"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace wsync::test
