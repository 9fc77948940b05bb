#include "round.hpp"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Unmeasured copies first (caches, the clock frequency), then the median of the timed ones.
constexpr int kTailWarmups = 2;
constexpr int kTailRepetitions = 11;

}  // namespace

ReceiveTail measureReceiveTail(const bus::BucketPlan& plan, std::uint32_t buffers,
                               std::span<const std::span<const std::byte>> source,
                               std::span<const std::span<std::byte>> scratch) {
  ReceiveTail tail;
  const std::uint32_t buckets = plan.bucketCount();
  const std::uint32_t first = buckets > buffers ? buckets - buffers : 0;
  std::vector<bus::Piece> pieces;
  for (std::uint32_t bucket = first; bucket < buckets; ++bucket) {
    for (const bus::Piece& piece : plan.piecesOfBucket(bucket)) {
      pieces.push_back(piece);
      tail.bytes += piece.bytes;
    }
  }
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  std::vector<double> timesUs;
  for (int repetition = 0; repetition < kTailWarmups + kTailRepetitions; ++repetition) {
    const auto start = Clock::now();
    XXH3_128bits_reset(state.get());
    for (const bus::Piece& piece : pieces) {
      std::byte* target = scratch[piece.tensor].data() + piece.tensorOffset;
      std::memcpy(target, source[piece.tensor].data() + piece.tensorOffset, piece.bytes);
      XXH3_128bits_update(state.get(), target, piece.bytes);
    }
    // A library call on the state and stores to memory the caller owns: nothing here can be optimised away.
    (void)XXH3_128bits_digest(state.get());
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (repetition >= kTailWarmups) timesUs.push_back(us);
  }
  std::nth_element(timesUs.begin(), timesUs.begin() + static_cast<std::ptrdiff_t>(timesUs.size() / 2), timesUs.end());
  tail.medianUs = timesUs[timesUs.size() / 2];
  return tail;
}

}  // namespace wsync::bench
