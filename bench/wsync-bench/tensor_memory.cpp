#include "tensor_memory.hpp"

#include <algorithm>
#include <new>

namespace wsync::bench {
namespace {

// glibc's malloc and PyTorch's CPU allocator both hand out at least cache-line-aligned blocks for large tensors.
constexpr std::size_t kTensorAlignment = 64;

std::size_t alignUp(std::size_t value) { return (value + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

}  // namespace

void TensorMemory::AlignedDelete::operator()(std::byte* bytes) const {
  ::operator delete[](bytes, std::align_val_t{kTensorAlignment});
}

TensorMemory::TensorMemory(const bus::Manifest& manifest) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < manifest.size(); ++i) total = alignUp(total + manifest.tensorBytes(i));
  // Value-initialised: every page is written (and faulted in) now, outside any timing.
  bytes_.reset(new (std::align_val_t{kTensorAlignment}) std::byte[std::max(total, kTensorAlignment)]());
  for (std::size_t i = 0, offset = 0; i < manifest.size(); ++i) {
    tensors_.emplace_back(bytes_.get() + offset, manifest.tensorBytes(i));
    constTensors_.emplace_back(bytes_.get() + offset, manifest.tensorBytes(i));
    offset = alignUp(offset + manifest.tensorBytes(i));
  }
}

void TensorMemory::fill(std::uint64_t seed) {
  for (std::size_t i = 0; i < tensors_.size(); ++i) cli::fillTensor(tensors_[i], seed, static_cast<std::uint32_t>(i));
}

void TensorMemory::moveToVersion(std::uint64_t seed, std::uint64_t version) {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    cli::perturbTensor(tensors_[i], seed, static_cast<std::uint32_t>(i), version);
  }
}

}  // namespace wsync::bench
