#include "wsync/worker_agent/worker_bindings.hpp"

#include <cinttypes>
#include <cstdio>
#include <iterator>
#include <limits>
#include <utility>

#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::worker_agent {

namespace {

std::string quoted(std::string_view name) { return "tensor '" + std::string(name) + "'"; }

// The byte count of (dtype, shape), or nothing when a dimension is negative or the product passes
// bus::kMaxManifestBytes (the most any manifest may hold, so such a binding could never match).
std::optional<std::uint64_t> byteCount(msg::DType dtype, std::span<const std::int64_t> shape) {
  std::uint64_t bytes = bus::elementBytes(dtype);
  for (const std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    const auto extent = static_cast<std::uint64_t>(dim);
    if (extent != 0 && bytes > bus::kMaxManifestBytes / extent) return std::nullopt;
    bytes *= extent;
  }
  return bytes;
}

}  // namespace

std::string formatShape(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string formatRange(std::span<const std::byte> memory) {
  const auto first = reinterpret_cast<std::uintptr_t>(memory.data());
  char text[64];
  std::snprintf(text, sizeof text, "[0x%" PRIxPTR ", 0x%" PRIxPTR ")", first, first + memory.size());
  return text;
}

tl::expected<void, WorkerFailure> WorkerBindings::bind(std::string name, msg::DType dtype,
                                                       std::vector<std::int64_t> shape,
                                                       std::span<std::byte> destination) {
  // The manifest's own rule, so that every name a worker can bind is one a manifest can carry.
  if (auto valid = bus::validateTensorName(name); !valid) {
    return bus::fail(WorkerError::InvalidBinding, std::move(valid.error().detail));
  }
  if (byName_.contains(name)) return bus::fail(WorkerError::InvalidBinding, quoted(name) + ": bound twice");
  if (bus::elementBytes(dtype) == 0) {
    return bus::fail(WorkerError::InvalidBinding,
                     quoted(name) + ": unknown dtype " + std::to_string(static_cast<unsigned>(dtype)));
  }
  if (shape.size() > bus::kMaxTensorRank) {
    return bus::fail(WorkerError::InvalidBinding, quoted(name) + ": " + std::to_string(shape.size()) +
                                                      " dimensions, at most " + std::to_string(bus::kMaxTensorRank));
  }
  const auto bytes = byteCount(dtype, shape);
  if (!bytes) {
    return bus::fail(WorkerError::InvalidBinding,
                     quoted(name) + ": shape " + formatShape(shape) + " is negative or too large");
  }
  if (destination.size() != *bytes) {
    return bus::fail(WorkerError::InvalidBinding, quoted(name) + ": " + std::string(bus::safetensorsName(dtype)) + " " +
                                                      formatShape(shape) + " needs " + std::to_string(*bytes) +
                                                      " bytes, the bound span has " +
                                                      std::to_string(destination.size()));
  }
  if (const auto other = overlapping(destination)) {
    const TensorBinding& bound = tensors_[*other];
    return bus::fail(WorkerError::InvalidBinding,
                     quoted(name) + ": memory " + formatRange(destination) + " overlaps that of " +
                         quoted(bound.spec.name) + " " + formatRange(bound.destination) +
                         ": each tensor needs memory of its own, or one would hold the other's bytes");
  }
  if (!destination.empty()) byAddress_.emplace(reinterpret_cast<std::uintptr_t>(destination.data()), tensors_.size());
  byName_.emplace(name, tensors_.size());
  tensors_.push_back(TensorBinding{bus::TensorSpec{std::move(name), dtype, std::move(shape)}, destination});
  totalBytes_ += *bytes;
  return {};
}

tl::expected<void, WorkerFailure> WorkerBindings::bindRegion(std::string tensor, bus::Box region,
                                                             std::string_view local,
                                                             std::vector<std::int64_t> localOffset,
                                                             std::vector<std::int64_t> localExtent) {
  const auto index = find(local);
  if (!index) {
    return bus::fail(WorkerError::InvalidBinding, "region " + bus::format(region) + " of " + quoted(tensor) +
                                                      " goes into " + quoted(local) + ", which is not bound");
  }
  const TensorBinding& into = tensors_[*index];
  if (auto valid = bus::validateTensorName(tensor); !valid) {
    return bus::fail(WorkerError::InvalidBinding, std::move(valid.error().detail));
  }
  if (region.offset.size() != region.extent.size() || localOffset.size() != localExtent.size() ||
      localOffset.size() != into.spec.shape.size()) {
    return bus::fail(WorkerError::InvalidBinding,
                     "region " + bus::format(region) + " of " + quoted(tensor) + " into " + quoted(local) + " " +
                         formatShape(into.spec.shape) + ": the place has " + std::to_string(localOffset.size()) +
                         " offsets and " + std::to_string(localExtent.size()) + " extents");
  }
  const std::string where = "region " + bus::format(region) + " of " + quoted(tensor) + " into " + quoted(local) + " " +
                            formatShape(into.spec.shape);
  if (!bus::boxWithin(bus::Box{localOffset, localExtent}, into.spec.shape)) {
    return bus::fail(WorkerError::InvalidBinding,
                     where + ": the place " + bus::format(bus::Box{localOffset, localExtent}) + " is outside it");
  }
  if (!bus::sameElementOrder(region.extent, localExtent)) {
    return bus::fail(WorkerError::InvalidBinding, where + ": the region's extents " + formatShape(region.extent) +
                                                      " differ from the place's " + formatShape(localExtent));
  }
  regions_.push_back(bus::BoundRegion{std::move(tensor), std::move(region), static_cast<std::uint32_t>(*index),
                                      std::move(localOffset), std::move(localExtent)});
  return {};
}

std::optional<bus::ReceiverBindings> WorkerBindings::regionBindings() const {
  if (regions_.empty()) return std::nullopt;
  bus::ReceiverBindings bindings;
  std::vector<bool> filled(tensors_.size(), false);
  for (const TensorBinding& binding : tensors_) {
    bindings.locals.push_back(bus::LocalTensor{binding.spec.name, binding.spec.dtype, binding.spec.shape});
  }
  bindings.regions = regions_;
  for (const bus::BoundRegion& bound : regions_) filled[bound.local] = true;
  for (std::size_t index = 0; index < tensors_.size(); ++index) {
    if (filled[index]) continue;
    const bus::TensorSpec& spec = tensors_[index].spec;
    bindings.regions.push_back(bus::BoundRegion{spec.name, bus::wholeBox(spec.shape), static_cast<std::uint32_t>(index),
                                                std::vector<std::int64_t>(spec.shape.size(), 0), spec.shape});
  }
  return bindings;
}

std::optional<std::size_t> WorkerBindings::find(std::string_view name) const {
  const auto found = byName_.find(std::string(name));
  if (found == byName_.end()) return std::nullopt;
  return found->second;
}

std::optional<std::size_t> WorkerBindings::overlapping(std::span<const std::byte> memory) const {
  if (memory.empty()) return std::nullopt;
  const auto first = reinterpret_cast<std::uintptr_t>(memory.data());
  const std::uintptr_t end = first + memory.size();
  // The first span starting at or after `first` overlaps if it starts before `end`, the last one starting before
  // `first` if it ends after `first`; the bound spans never overlap, so every other one starts after the first or
  // ends before the last one starts.
  const auto after = byAddress_.lower_bound(first);
  if (after != byAddress_.end() && after->first < end) return after->second;
  if (after != byAddress_.begin()) {
    const auto before = std::prev(after);
    if (before->first + tensors_[before->second].destination.size() > first) return before->second;
  }
  return std::nullopt;
}

tl::expected<BindingMap, WorkerFailure> matchManifest(const bus::Manifest& manifest, const WorkerBindings& bindings) {
  const auto& wanted = manifest.tensors();
  // Counts first in the detail, since they say at a glance whether a whole block of the model is missing; the
  // tensor named after them is the first that proves it.
  std::string counts;
  if (wanted.size() != bindings.size()) {
    counts = "manifest has " + std::to_string(wanted.size()) + " tensors, " + std::to_string(bindings.size()) +
             " are bound; ";
  }
  BindingMap map;
  map.reserve(wanted.size());
  for (const bus::TensorSpec& tensor : wanted) {
    const auto index = bindings.find(tensor.name);
    if (!index) {
      return bus::fail(WorkerError::ManifestMismatch, counts + quoted(tensor.name) + ": in the manifest but not bound");
    }
    const bus::TensorSpec& bound = bindings.tensors()[*index].spec;
    if (bound.dtype != tensor.dtype) {
      return bus::fail(WorkerError::ManifestMismatch, counts + quoted(tensor.name) + ": manifest dtype " +
                                                          std::string(bus::safetensorsName(tensor.dtype)) + ", bound " +
                                                          std::string(bus::safetensorsName(bound.dtype)));
    }
    if (bound.shape != tensor.shape) {
      return bus::fail(WorkerError::ManifestMismatch, counts + quoted(tensor.name) + ": manifest shape " +
                                                          formatShape(tensor.shape) + ", bound " +
                                                          formatShape(bound.shape));
    }
    map.push_back(static_cast<std::uint32_t>(*index));
  }
  if (wanted.size() != bindings.size()) {
    // Every manifest tensor is bound (names are unique on both sides), so some bound tensor is not in it.
    std::vector<bool> used(bindings.size(), false);
    for (const std::uint32_t index : map) used[index] = true;
    for (std::size_t index = 0; index < used.size(); ++index) {
      if (!used[index]) {
        return bus::fail(WorkerError::ManifestMismatch,
                         counts + quoted(bindings.tensors()[index].spec.name) + ": bound but not in the manifest");
      }
    }
  }
  return map;
}

}  // namespace wsync::worker_agent
