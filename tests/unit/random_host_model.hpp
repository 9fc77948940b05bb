#pragma once
// A model in host memory for the host channels' tests (the shm arena, tcp): tensors of random sizes and bytes, views
// of them as a channel takes them, and zeroed staging of the same shapes for the receivers.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "wsync/bus/protocol/manifest.hpp"

namespace wsync::test {

struct HostModel {
  bus::Manifest manifest;
  std::vector<std::vector<std::byte>> tensors;
};

// Tensors of random sizes (some empty, some far larger than a small bucket), filled with bytes that depend on `seed`;
// `extraMiB` adds one large tensor, for transfers that must still be running when something happens.
inline HostModel makeHostModel(std::uint64_t seed, std::size_t count, std::int64_t extraMiB = 0) {
  std::mt19937_64 random(seed);
  std::vector<bus::TensorSpec> specs;
  for (std::size_t i = 0; i < count; ++i) {
    const auto elements = static_cast<std::int64_t>(random() % 8 == 0 ? 20000 + random() % 40000 : random() % 700);
    specs.push_back({"layer." + std::to_string(i), i % 3 == 0 ? msg::DType::BF16 : msg::DType::F32, {elements}});
  }
  if (extraMiB > 0) specs.push_back({"large", msg::DType::U8, {extraMiB << 20}});
  HostModel model{*bus::Manifest::create(std::move(specs)), {}};
  for (std::size_t i = 0; i < model.manifest.size(); ++i) {
    std::vector<std::byte> bytes(model.manifest.tensorBytes(i));
    for (std::byte& b : bytes) b = static_cast<std::byte>(random());
    model.tensors.push_back(std::move(bytes));
  }
  return model;
}

inline std::vector<std::span<const std::byte>> views(const std::vector<std::vector<std::byte>>& tensors) {
  return {tensors.begin(), tensors.end()};
}

inline std::vector<std::span<std::byte>> views(std::vector<std::vector<std::byte>>& tensors) {
  return {tensors.begin(), tensors.end()};
}

// Zeroed buffers of the manifest's tensors' sizes: what a receiver binds.
inline std::vector<std::vector<std::byte>> stagingFor(const bus::Manifest& manifest) {
  std::vector<std::vector<std::byte>> staging;
  for (std::size_t i = 0; i < manifest.size(); ++i) staging.emplace_back(manifest.tensorBytes(i));
  return staging;
}

}  // namespace wsync::test
