#include "staging.hpp"

#include <vector>

namespace wsync::worker_agent::detail {

namespace {

// Each staged tensor starts on a cache line, so the copies in and out run at full width.
constexpr std::uint64_t kStagingAlignment = 64;

std::uint64_t alignUp(std::uint64_t value) {
  return (value + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment;
}

}  // namespace

void Staging::prepare(const bus::Manifest& manifest) {
  // Every round of the same manifest needs the same layout: keep the per-round cost independent of the number of
  // tensors (the layout walk is a pass over every tensor).
  if (hasLayout_ && laidOut_ == manifest.digest()) return;
  std::vector<std::uint64_t> sizes(manifest.size());
  for (std::size_t index = 0; index < manifest.size(); ++index) sizes[index] = manifest.tensorBytes(index);
  layOut(sizes);
  laidOut_ = manifest.digest();
  hasLayout_ = true;
  localsLaidOut_ = false;
}

void Staging::prepareLocals(std::span<const std::uint64_t> sizes) {
  if (localsLaidOut_) return;
  layOut(sizes);
  hasLayout_ = false;
  localsLaidOut_ = true;
}

void Staging::layOut(std::span<const std::uint64_t> sizes) {
  std::uint64_t needed = 0;
  for (const std::uint64_t bytes : sizes) needed += alignUp(bytes);
  if (needed > capacity_) {
    block_.reset();  // the old block goes first, so two copies of the model never coexist
    // Not initialised: every byte is written by a receive before anything reads it.
    block_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(needed));
    capacity_ = needed;
  }
  tensors_.clear();
  tensors_.reserve(sizes.size());
  std::uint64_t offset = 0;
  for (const std::uint64_t bytes : sizes) {
    tensors_.emplace_back(block_.get() + offset, static_cast<std::size_t>(bytes));
    offset += alignUp(bytes);
  }
}

}  // namespace wsync::worker_agent::detail
