#include "tensor_memory.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <wsync/cli/model_catalog.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

// glibc's malloc and PyTorch's CPU allocator both hand out at least cache-line-aligned blocks for large tensors.
constexpr std::size_t kTensorAlignment = 64;

std::size_t alignUp(std::size_t value, std::size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

TensorMemory::TensorMemory(const bus::Manifest& manifest) {
  std::vector<std::size_t> offsets;
  offsets.reserve(manifest.size());
  std::size_t end = 0;
  for (std::size_t i = 0; i < manifest.size(); ++i) {
    offsets.push_back(end);
    end = alignUp(end + manifest.tensorBytes(i), kTensorAlignment);
  }
  mappedBytes_ = end > 0 ? end : kTensorAlignment;
  base_ = ::mmap(nullptr, mappedBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    throw BenchFailure("cannot map " + std::to_string(mappedBytes_) + " bytes for tensors: " + std::strerror(errno));
  }
  // Faults every page in now, outside any timing.
  std::memset(base_, 0, mappedBytes_);
  auto* bytes = static_cast<std::byte*>(base_);
  for (std::size_t i = 0; i < manifest.size(); ++i) {
    tensors_.emplace_back(bytes + offsets[i], manifest.tensorBytes(i));
    constTensors_.emplace_back(bytes + offsets[i], manifest.tensorBytes(i));
  }
}

TensorMemory::~TensorMemory() {
  if (base_ != nullptr) ::munmap(base_, mappedBytes_);
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
