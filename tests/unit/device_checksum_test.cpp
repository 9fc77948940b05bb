// The device checksum's host reference (device_checksum.hpp): it follows the documented definition word for word,
// partial sums of any pieces added in any order give the whole digest (what lets thousands of GPU threads fold a
// version), and it sees a flipped bit, swapped words or tensors, a different length and a moved tensor. A golden
// value pins the definition, so that the device kernels and this reference cannot drift together unnoticed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "wsync/bus/channel/device_checksum.hpp"

namespace wsync::bus {
namespace {

using Bytes = std::vector<std::byte>;

// One lane's term for the word at index `wordIndex` of tensor `tensor`, written out again from the header's comment
// (not from addDeviceChecksumWord), so that code and documentation are checked against each other.
std::uint64_t definitionTerm(int lane, std::uint32_t tensor, std::uint64_t wordIndex, std::uint64_t value) {
  namespace k = device_checksum;
  const auto lo = static_cast<std::uint32_t>(value & 0xFFFF'FFFFU);
  const auto hi = static_cast<std::uint32_t>(value >> 32);
  const auto indexLo = static_cast<std::uint32_t>(wordIndex & 0xFFFF'FFFFU);
  const auto indexHi = static_cast<std::uint32_t>(wordIndex >> 32);
  const std::uint32_t ka =
      (indexLo * k::kMulW[lane]) ^ (indexHi * k::kMulH[lane]) ^ (tensor * k::kMulT[lane]) ^ k::kSeed[lane];
  const std::uint32_t kb = std::rotl(ka, 16) ^ k::kSeedB[lane];
  return std::uint64_t{static_cast<std::uint32_t>(lo + ka)} * std::uint64_t{static_cast<std::uint32_t>(hi + kb)};
}

// Word `wordIndex` of `bytes`: little-endian, the last one zero-padded.
std::uint64_t wordAt(std::span<const std::byte> bytes, std::uint64_t wordIndex) {
  std::uint64_t value = 0;
  for (std::uint64_t i = 0; i < 8 && wordIndex * 8 + i < bytes.size(); ++i) {
    value |= std::uint64_t{std::to_integer<std::uint8_t>(bytes[wordIndex * 8 + i])} << (8 * i);
  }
  return value;
}

std::uint64_t wordCount(std::uint64_t bytes) { return (bytes + 7) / 8; }

// The sums of words [firstWord, endWord) of tensor `tensor`, as one GPU thread block would fold a piece of it.
DeviceChecksumSums sumsOfWords(std::uint32_t tensor, std::span<const std::byte> bytes, std::uint64_t firstWord,
                               std::uint64_t endWord) {
  DeviceChecksumSums sums;
  for (std::uint64_t word = firstWord; word < endWord; ++word) {
    addDeviceChecksumWord(sums, tensor, word, wordAt(bytes, word));
  }
  return sums;
}

DeviceChecksumSums plus(const DeviceChecksumSums& a, const DeviceChecksumSums& b) {
  DeviceChecksumSums sum;
  for (int lane = 0; lane < 2; ++lane) sum.lane[lane] = a.lane[lane] + b.lane[lane];
  return sum;
}

Digest digestOf(const std::vector<Bytes>& tensors) {
  const std::vector<std::span<const std::byte>> views(tensors.begin(), tensors.end());
  return deviceChecksumOfHost(views);
}

std::uint64_t totalBytes(const std::vector<Bytes>& tensors) {
  std::uint64_t total = 0;
  for (const Bytes& tensor : tensors) total += tensor.size();
  return total;
}

Bytes randomBytes(std::mt19937_64& random, std::size_t size) {
  Bytes bytes(size);
  for (std::byte& byte : bytes) byte = static_cast<std::byte>(random() & 0xFFU);
  return bytes;
}

// Tensors of random sizes, odd tails and empty ones among them.
std::vector<Bytes> randomTensors(std::mt19937_64& random, std::size_t count, std::size_t maxBytes) {
  std::vector<Bytes> tensors;
  for (std::size_t i = 0; i < count; ++i) tensors.push_back(randomBytes(random, random() % (maxBytes + 1)));
  return tensors;
}

TEST(DeviceChecksum, AddWordFollowsTheDocumentedTerms) {
  std::mt19937_64 random(1);
  for (int trial = 0; trial < 10'000; ++trial) {
    const auto tensor = static_cast<std::uint32_t>(random());
    // Word indices above 2^32 too: their high half has a key of its own.
    const std::uint64_t word = trial % 2 == 0 ? random() % 4096 : random();
    const std::uint64_t value = random();
    DeviceChecksumSums sums;
    addDeviceChecksumWord(sums, tensor, word, value);
    ASSERT_EQ(sums.lane[0], definitionTerm(0, tensor, word, value)) << "tensor " << tensor << " word " << word;
    ASSERT_EQ(sums.lane[1], definitionTerm(1, tensor, word, value)) << "tensor " << tensor << " word " << word;
  }
}

TEST(DeviceChecksum, HostReferenceIsTheDocumentedSumOverZeroPaddedWords) {
  std::mt19937_64 random(2);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<Bytes> tensors = randomTensors(random, 1 + random() % 6, 70);
    DeviceChecksumSums sums;
    for (std::uint32_t t = 0; t < tensors.size(); ++t) {
      for (std::uint64_t word = 0; word < wordCount(tensors[t].size()); ++word) {
        for (int lane = 0; lane < 2; ++lane) sums.lane[lane] += definitionTerm(lane, t, word, wordAt(tensors[t], word));
      }
    }
    ASSERT_EQ(digestOf(tensors), finishDeviceChecksum(sums, totalBytes(tensors))) << "trial " << trial;
  }
}

// What the device does: every piece of every tensor (cut at multiples of 8 bytes, as bucket pieces of an aligned
// plan are) folded separately, the partial sums added in whatever order blocks finish.
TEST(DeviceChecksum, PiecesSummedInAnyOrderGiveTheWholeDigest) {
  std::mt19937_64 random(3);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<Bytes> tensors = randomTensors(random, 1 + random() % 5, 400);
    std::vector<DeviceChecksumSums> pieces;
    for (std::uint32_t t = 0; t < tensors.size(); ++t) {
      const std::uint64_t words = wordCount(tensors[t].size());
      std::uint64_t first = 0;
      while (first < words) {
        const std::uint64_t end = std::min(words, first + 1 + random() % 9);
        pieces.push_back(sumsOfWords(t, tensors[t], first, end));
        first = end;
      }
    }
    std::shuffle(pieces.begin(), pieces.end(), random);
    DeviceChecksumSums sums;
    for (const DeviceChecksumSums& piece : pieces) sums = plus(sums, piece);
    ASSERT_EQ(finishDeviceChecksum(sums, totalBytes(tensors)), digestOf(tensors)) << "trial " << trial;
  }
}

TEST(DeviceChecksum, EveryFlippedBitChangesTheDigest) {
  std::mt19937_64 random(4);
  std::vector<Bytes> tensors{randomBytes(random, 40), randomBytes(random, 13), randomBytes(random, 8)};
  const Digest original = digestOf(tensors);
  for (Bytes& tensor : tensors) {
    for (std::byte& byte : tensor) {
      for (int bit = 0; bit < 8; ++bit) {
        byte ^= std::byte{1} << bit;
        EXPECT_NE(digestOf(tensors), original);
        byte ^= std::byte{1} << bit;
      }
    }
  }
  EXPECT_EQ(digestOf(tensors), original);
}

TEST(DeviceChecksum, SwappedWordsChangeTheDigest) {
  std::mt19937_64 random(5);
  std::vector<Bytes> tensors{randomBytes(random, 64)};
  const Digest original = digestOf(tensors);
  for (std::size_t a = 0; a < 8; ++a) {
    for (std::size_t b = a + 1; b < 8; ++b) {
      std::swap_ranges(tensors[0].begin() + static_cast<std::ptrdiff_t>(8 * a),
                       tensors[0].begin() + static_cast<std::ptrdiff_t>(8 * a + 8),
                       tensors[0].begin() + static_cast<std::ptrdiff_t>(8 * b));
      EXPECT_NE(digestOf(tensors), original) << "words " << a << " and " << b;
      std::swap_ranges(tensors[0].begin() + static_cast<std::ptrdiff_t>(8 * a),
                       tensors[0].begin() + static_cast<std::ptrdiff_t>(8 * a + 8),
                       tensors[0].begin() + static_cast<std::ptrdiff_t>(8 * b));
    }
  }
  EXPECT_EQ(digestOf(tensors), original);
}

TEST(DeviceChecksum, SwappedTensorsOfEqualSizeChangeTheDigest) {
  std::mt19937_64 random(6);
  const Bytes first = randomBytes(random, 24);
  const Bytes second = randomBytes(random, 24);
  EXPECT_NE(digestOf({first, second}), digestOf({second, first}));
  // Equal content in two tensors is not the same as the same content in one position.
  EXPECT_NE(digestOf({first, first}), digestOf({first, Bytes(24)}));
}

// A 13-byte tensor and the same 13 bytes followed by 3 zero bytes read as the same two words (the last one
// zero-padded), so their lane sums are equal; only the total bytes the digest includes tell them apart.
TEST(DeviceChecksum, ZeroPaddedTailDiffersOnlyInTotalBytes) {
  std::mt19937_64 random(7);
  const Bytes odd = randomBytes(random, 13);
  Bytes padded = odd;
  padded.resize(16, std::byte{0});

  const DeviceChecksumSums oddSums = sumsOfWords(0, odd, 0, wordCount(odd.size()));
  const DeviceChecksumSums paddedSums = sumsOfWords(0, padded, 0, wordCount(padded.size()));
  EXPECT_EQ(oddSums.lane[0], paddedSums.lane[0]);
  EXPECT_EQ(oddSums.lane[1], paddedSums.lane[1]);

  EXPECT_EQ(digestOf({odd}), finishDeviceChecksum(oddSums, 13));
  EXPECT_EQ(digestOf({padded}), finishDeviceChecksum(paddedSums, 16));
  EXPECT_NE(digestOf({odd}), digestOf({padded}));
}

// An empty tensor adds no word, but it takes an index: the tensors after it are keyed differently.
TEST(DeviceChecksum, EmptyTensors) {
  const Digest nothing = finishDeviceChecksum(DeviceChecksumSums{}, 0);
  EXPECT_EQ(deviceChecksumOfHost({}), nothing);
  EXPECT_EQ(digestOf({Bytes{}}), nothing);
  EXPECT_EQ(digestOf({Bytes{}, Bytes{}, Bytes{}}), nothing);

  std::mt19937_64 random(8);
  const Bytes some = randomBytes(random, 20);
  EXPECT_NE(digestOf({some}), nothing);
  EXPECT_EQ(digestOf({some, Bytes{}}), digestOf({some})) << "a trailing empty tensor adds nothing";
  EXPECT_NE(digestOf({Bytes{}, some}), digestOf({some})) << "an empty tensor before another moves its key";
}

// Golden value: computed once with this implementation and written down here. If this fails, the definition of the
// digest changed: the device kernels and every peer must change with it (it is compared across processes and
// builds), so change the expected value only together with them and docs/gpu-channels.md.
TEST(DeviceChecksum, GoldenValue) {
  Bytes counting(21);
  for (std::size_t i = 0; i < counting.size(); ++i) counting[i] = static_cast<std::byte>(i * 7 + 1);
  const Bytes ones(8, std::byte{0xFF});
  const Bytes tail{std::byte{0xDE}, std::byte{0xAD}, std::byte{0xBE}};
  const Digest digest = digestOf({counting, ones, Bytes{}, tail});
  EXPECT_EQ(digest.lo, 0xD7E4CA36083BB0D2ULL);
  EXPECT_EQ(digest.hi, 0xC8CE0221B470406DULL);
}

}  // namespace
}  // namespace wsync::bus
