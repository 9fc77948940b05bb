// LayoutKey: the key GPU channels keep their cached layouts under, read from the span array unless its token says
// the array is one read before.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "wsync/bus/channel/layout_key.hpp"

namespace wsync::bus {
namespace {

TEST(LayoutKey, TheKeyIsTheArraysAddressesAndSizesWhateverTheirConstness) {
  std::array<std::byte, 64> memory{};
  std::vector<std::span<std::byte>> writable{std::span(memory).first(16), std::span(memory).subspan(16, 8)};
  const std::vector<std::span<const std::byte>> readable{writable[0], writable[1]};
  LayoutKey a;
  LayoutKey b;
  EXPECT_EQ(a.of(writable, 0), b.of(readable, 0));

  const std::vector<std::span<const std::byte>> moved{std::span(memory).subspan(8, 16), readable[1]};
  const std::vector<std::span<const std::byte>> resized{std::span(memory).first(15), readable[1]};
  EXPECT_NE(a.of(moved, 0), a.of(readable, 0));
  EXPECT_NE(a.of(resized, 0), a.of(readable, 0));
}

TEST(LayoutKey, OnlyATokenNamedAtTheLastReadSparesReading) {
  std::array<std::byte, 64> memory{};
  const std::vector<std::span<const std::byte>> first{std::span(memory).first(32)};
  const std::vector<std::span<const std::byte>> second{std::span(memory).subspan(32)};
  LayoutKey key;
  const Digest firstKey = key.of(first, 5);
  EXPECT_EQ(key.reads(), 1u);
  // The caller vouches: the array is not read, and its remembered key comes back. (Were `second` truly what token 5
  // names, it would be the caller's broken promise; the key shows the promise is what is trusted.)
  EXPECT_EQ(key.of(second, 5), firstKey);
  EXPECT_EQ(key.reads(), 1u);
  // 0 vouches nothing, every time, and forgets the named array.
  const Digest secondKey = key.of(second, 0);
  EXPECT_NE(secondKey, firstKey);
  EXPECT_EQ(key.of(second, 0), secondKey);
  EXPECT_EQ(key.reads(), 3u);
  EXPECT_EQ(key.of(first, 5), firstKey);
  EXPECT_EQ(key.reads(), 4u);
  // A new token is read once, then trusted.
  EXPECT_EQ(key.of(second, 6), secondKey);
  EXPECT_EQ(key.of(second, 6), secondKey);
  EXPECT_EQ(key.reads(), 5u);
}

}  // namespace
}  // namespace wsync::bus
