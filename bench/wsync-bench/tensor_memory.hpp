#pragma once
// A catalog model's tensors (cli::modelTensors) in one allocation, each on a cache line as a CPU allocator would place
// it; every byte written at once, so that no timed copy pays for a page fault.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <wsync/bus/protocol/manifest.hpp>
#include <wsync/cli/model_catalog.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {

// Any value: content is a pure function of (seed, tensor, version), so runs are comparable.
inline constexpr std::uint64_t kContentSeed = 20261122;
// 256-byte tensor starts in a bucket, as the coordinator plans them (docs/bucket-plan.md; GPU channels need 16).
inline constexpr std::uint32_t kPlanAlignment = 256;

inline bus::Manifest catalogManifest(const std::string& model) {
  return orThrow(bus::Manifest::create(orThrow(cli::modelTensors(model), "model " + model)), "model " + model);
}

class TensorMemory {
 public:
  explicit TensorMemory(const bus::Manifest& manifest);

  std::span<const std::span<std::byte>> tensors() const { return tensors_; }
  std::span<const std::span<const std::byte>> constTensors() const { return constTensors_; }

  // Content under `seed` (model_catalog's fillTensor); moving to another version rewrites 1/32 of the words.
  void fill(std::uint64_t seed);
  void moveToVersion(std::uint64_t seed, std::uint64_t version);

 private:
  struct AlignedDelete {
    void operator()(std::byte* bytes) const;
  };
  std::unique_ptr<std::byte[], AlignedDelete> bytes_;
  std::vector<std::span<std::byte>> tensors_;
  std::vector<std::span<const std::byte>> constTensors_;
};

}  // namespace wsync::bench
