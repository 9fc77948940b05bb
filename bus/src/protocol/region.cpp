#include "wsync/bus/protocol/region.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {
namespace {

std::string quoted(std::string_view name) { return "tensor '" + std::string(name) + "'"; }

// "tensor 'w' [64, 256]": how every refusal introduces a tensor.
std::string named(const TensorSpec& tensor) { return quoted(tensor.name) + " " + formatShape(tensor.shape); }

// The extents of `box` without those of 1: two places hold their elements in the same order exactly when these
// are equal.
std::vector<std::int64_t> squeezed(std::span<const std::int64_t> extent) {
  std::vector<std::int64_t> kept;
  for (const std::int64_t dim : extent) {
    if (dim != 1) kept.push_back(dim);
  }
  return kept;
}

// The first pair of `boxes` that meet, or nothing: boxes sorted by their first offset let each one stop at the
// first box that starts past its end in dimension 0, so dim-0 shards cost a pass, not a square.
std::optional<std::pair<std::size_t, std::size_t>> firstOverlap(const std::vector<const Box*>& boxes) {
  std::vector<std::size_t> order(boxes.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
  auto start = [&](std::size_t index) { return boxes[index]->offset.empty() ? 0 : boxes[index]->offset[0]; };
  auto end = [&](std::size_t index) {
    return boxes[index]->offset.empty() ? 1 : boxes[index]->offset[0] + boxes[index]->extent[0];
  };
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return start(a) < start(b); });
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (std::size_t j = i + 1; j < order.size() && start(order[j]) < end(order[i]); ++j) {
      if (meets(*boxes[order[i]], *boxes[order[j]])) return std::pair(order[i], order[j]);
    }
  }
  return std::nullopt;
}

// A box of `shape` that none of `boxes` (disjoint, within the shape) covers, found on the grid their edges cut
// the tensor into; nothing when the grid would be too large to walk (the caller names the count of elements then).
std::optional<Box> uncoveredBox(std::span<const std::int64_t> shape, const std::vector<const Box*>& boxes) {
  constexpr std::uint64_t kMaxGridCells = 1U << 20;
  const std::size_t rank = shape.size();
  std::vector<std::vector<std::int64_t>> cuts(rank);
  std::uint64_t cells = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    cuts[d] = {0, shape[d]};
    for (const Box* box : boxes) {
      cuts[d].push_back(box->offset[d]);
      cuts[d].push_back(box->offset[d] + box->extent[d]);
    }
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
    cells *= cuts[d].size() - 1;
    if (cells > kMaxGridCells) return std::nullopt;
  }
  std::vector<std::size_t> at(rank, 0);
  for (std::uint64_t cell = 0; cell < cells; ++cell) {
    Box candidate;
    for (std::size_t d = 0; d < rank; ++d) {
      candidate.offset.push_back(cuts[d][at[d]]);
      candidate.extent.push_back(cuts[d][at[d] + 1] - cuts[d][at[d]]);
    }
    const bool covered = volume(candidate) == 0 || std::any_of(boxes.begin(), boxes.end(),
                                                               [&](const Box* box) { return meets(*box, candidate); });
    if (!covered) return candidate;
    for (std::size_t d = rank; d-- > 0;) {
      if (++at[d] + 1 < cuts[d].size()) break;
      at[d] = 0;
    }
  }
  return std::nullopt;
}

void addInts(StreamDigest& stream, std::span<const std::int64_t> values) {
  const std::uint64_t count = values.size();
  stream.add(&count, sizeof count);
  stream.add(values.data(), values.size_bytes());
}

void addBox(StreamDigest& stream, const Box& box) {
  addInts(stream, box.offset);
  addInts(stream, box.extent);
}

}  // namespace

std::string_view toString(RegionError error) {
  switch (error) {
    case RegionError::UnknownTensor:
      return "unknown tensor";
    case RegionError::RankMismatch:
      return "rank mismatch";
    case RegionError::OutsideTensor:
      return "region outside the tensor";
    case RegionError::Overlap:
      return "overlapping regions";
    case RegionError::Gap:
      return "gap";
    case RegionError::ShapeMismatch:
      return "shape mismatch";
    case RegionError::DTypeMismatch:
      return "dtype mismatch";
    case RegionError::InvalidBinding:
      return "invalid binding";
    case RegionError::TooLarge:
      return "too many regions";
    case RegionError::SourceMismatch:
      return "sources disagree";
  }
  return "unknown region error";
}

Box wholeBox(std::span<const std::int64_t> shape) {
  return Box{std::vector<std::int64_t>(shape.size(), 0), std::vector<std::int64_t>(shape.begin(), shape.end())};
}

std::uint64_t volume(const Box& box) {
  std::uint64_t elements = 1;
  for (const std::int64_t dim : box.extent) elements *= static_cast<std::uint64_t>(dim);
  return elements;
}

bool sameElementOrder(std::span<const std::int64_t> a, std::span<const std::int64_t> b) {
  return squeezed(a) == squeezed(b);
}

bool boxWithin(const Box& inner, std::span<const std::int64_t> shape) {
  if (inner.offset.size() != shape.size() || inner.extent.size() != shape.size()) return false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (inner.offset[d] < 0 || inner.extent[d] < 0 || inner.offset[d] > shape[d] ||
        inner.extent[d] > shape[d] - inner.offset[d]) {
      return false;
    }
  }
  return true;
}

Box intersect(const Box& a, const Box& b) {
  Box common;
  common.offset.resize(a.offset.size());
  common.extent.resize(a.offset.size());
  for (std::size_t d = 0; d < a.offset.size(); ++d) {
    const std::int64_t first = std::max(a.offset[d], b.offset[d]);
    const std::int64_t end = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    common.offset[d] = first;
    common.extent[d] = std::max<std::int64_t>(0, end - first);
  }
  return common;
}

bool meets(const Box& a, const Box& b) {
  for (std::size_t d = 0; d < a.offset.size(); ++d) {
    if (std::max(a.offset[d], b.offset[d]) >= std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d])) {
      return false;
    }
  }
  return true;
}

std::string format(const Box& box) {
  std::string text = "[";
  for (std::size_t d = 0; d < box.offset.size(); ++d) {
    if (d != 0) text += ", ";
    text += std::to_string(box.offset[d]) + ":" + std::to_string(box.offset[d] + box.extent[d]);
  }
  return text + "]";
}

std::string formatShape(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) text += (d == 0 ? "" : ", ") + std::to_string(shape[d]);
  return text + "]";
}

SourceHoldings wholeHoldings(const Manifest& manifest) {
  SourceHoldings holdings;
  holdings.regions.reserve(manifest.size());
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) {
    holdings.regions.push_back(HeldRegion{tensor, wholeBox(manifest.tensors()[tensor].shape)});
  }
  return holdings;
}

ReceiverBindings wholeBindings(const Manifest& manifest) {
  ReceiverBindings bindings;
  bindings.locals.reserve(manifest.size());
  bindings.regions.reserve(manifest.size());
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) {
    const TensorSpec& spec = manifest.tensors()[tensor];
    bindings.locals.push_back(LocalTensor{spec.name, spec.dtype, spec.shape});
    Box whole = wholeBox(spec.shape);
    bindings.regions.push_back(BoundRegion{spec.name, whole, tensor, whole.offset, whole.extent});
  }
  return bindings;
}

tl::expected<void, RegionFailure> checkHoldings(const Manifest& manifest, const SourceHoldings& holdings,
                                                const std::string& source) {
  if (holdings.regions.size() > kMaxRegionsPerAgent) {
    return fail(RegionError::TooLarge, source + " declares " + std::to_string(holdings.regions.size()) +
                                           " regions, at most " + std::to_string(kMaxRegionsPerAgent));
  }
  std::vector<std::vector<const Box*>> byTensor(manifest.size());
  for (const HeldRegion& held : holdings.regions) {
    if (held.tensor >= manifest.size()) {
      return fail(RegionError::UnknownTensor, source + " holds tensor " + std::to_string(held.tensor) +
                                                  ", and the manifest has " + std::to_string(manifest.size()));
    }
    const TensorSpec& tensor = manifest.tensors()[held.tensor];
    if (held.box.offset.size() != tensor.shape.size() || held.box.extent.size() != tensor.shape.size()) {
      return fail(RegionError::RankMismatch, source + " holds a region of " + std::to_string(held.box.offset.size()) +
                                                 " dimensions of " + named(tensor));
    }
    if (!boxWithin(held.box, tensor.shape)) {
      return fail(RegionError::OutsideTensor,
                  source + " holds region " + format(held.box) + " of " + named(tensor) + ", outside the tensor");
    }
    byTensor[held.tensor].push_back(&held.box);
  }
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) {
    if (const auto pair = firstOverlap(byTensor[tensor])) {
      const Box& a = *byTensor[tensor][pair->first];
      const Box& b = *byTensor[tensor][pair->second];
      return fail(RegionError::Overlap, source + " holds regions " + format(a) + " and " + format(b) + " of " +
                                            named(manifest.tensors()[tensor]) + ", which overlap in " +
                                            format(intersect(a, b)));
    }
  }
  return {};
}

tl::expected<void, RegionFailure> checkCoverage(const Manifest& manifest, std::span<const SourceHoldings> sources,
                                                std::span<const std::string> names) {
  // Per tensor: its distinct boxes (replicas are equal boxes), with the first source holding each.
  struct Distinct {
    const Box* box;
    std::size_t source;
  };
  std::vector<std::vector<Distinct>> byTensor(manifest.size());
  for (std::size_t source = 0; source < sources.size(); ++source) {
    for (const HeldRegion& held : sources[source].regions) {
      auto& distinct = byTensor[held.tensor];
      const bool replica =
          std::any_of(distinct.begin(), distinct.end(), [&](const Distinct& other) { return *other.box == held.box; });
      if (!replica) distinct.push_back(Distinct{&held.box, source});
    }
  }
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) {
    const TensorSpec& spec = manifest.tensors()[tensor];
    std::vector<const Box*> boxes;
    for (const Distinct& distinct : byTensor[tensor]) boxes.push_back(distinct.box);
    if (const auto pair = firstOverlap(boxes)) {
      const Distinct& a = byTensor[tensor][pair->first];
      const Distinct& b = byTensor[tensor][pair->second];
      return fail(RegionError::Overlap, names[a.source] + " holds region " + format(*a.box) + " and " +
                                            names[b.source] + " region " + format(*b.box) + " of " + named(spec) +
                                            ": they overlap in " + format(intersect(*a.box, *b.box)) +
                                            " but differ (a region is held whole by each replica, or by one source)");
    }
    std::uint64_t held = 0;
    for (const Box* box : boxes) held += volume(*box);
    const std::uint64_t whole = volume(wholeBox(spec.shape));
    if (held != whole) {
      const auto gap = uncoveredBox(spec.shape, boxes);
      return fail(RegionError::Gap,
                  "no source holds " +
                      (gap ? "region " + format(*gap)
                           : std::to_string(whole - held) + " of the " + std::to_string(whole) + " elements") +
                      " of " + named(spec));
    }
  }
  return {};
}

tl::expected<std::vector<std::uint32_t>, RegionFailure> checkBindings(const Manifest& manifest,
                                                                      const ReceiverBindings& bindings,
                                                                      const std::string& receiver) {
  if (bindings.locals.size() > kMaxLocalTensors || bindings.regions.size() > kMaxRegionsPerAgent) {
    return fail(RegionError::TooLarge, receiver + " binds " + std::to_string(bindings.regions.size()) +
                                           " regions into " + std::to_string(bindings.locals.size()) +
                                           " local tensors, at most " + std::to_string(kMaxRegionsPerAgent) + " and " +
                                           std::to_string(kMaxLocalTensors));
  }
  std::unordered_set<std::string_view> names;
  for (const LocalTensor& local : bindings.locals) {
    if (auto valid = validateTensorName(local.name); !valid) {
      return fail(RegionError::InvalidBinding, receiver + ": " + valid.error().detail);
    }
    if (!names.insert(local.name).second) {
      return fail(RegionError::InvalidBinding, receiver + ": local " + quoted(local.name) + " is bound twice");
    }
    if (elementBytes(local.dtype) == 0 || local.shape.size() > kMaxTensorRank ||
        std::any_of(local.shape.begin(), local.shape.end(), [](std::int64_t dim) { return dim < 0; })) {
      return fail(RegionError::InvalidBinding, receiver + ": local " + quoted(local.name) + " " +
                                                   formatShape(local.shape) + " is no tensor (dtype, rank or shape)");
    }
  }
  std::unordered_map<std::string_view, std::uint32_t> indexOf;
  indexOf.reserve(manifest.size());
  for (std::uint32_t index = 0; index < manifest.size(); ++index)
    indexOf.emplace(manifest.tensors()[index].name, index);
  std::vector<std::uint32_t> tensors;
  tensors.reserve(bindings.regions.size());
  std::vector<std::vector<const BoundRegion*>> byLocal(bindings.locals.size());
  for (const BoundRegion& bound : bindings.regions) {
    const auto found = indexOf.find(bound.tensor);
    if (found == indexOf.end()) {
      return fail(RegionError::UnknownTensor, receiver + " binds " + quoted(bound.tensor) + ", which the manifest (" +
                                                  std::to_string(manifest.size()) + " tensors) does not have");
    }
    tensors.push_back(found->second);
    const TensorSpec& tensor = manifest.tensors()[found->second];
    if (bound.local >= bindings.locals.size()) {
      return fail(RegionError::UnknownTensor, receiver + " binds " + named(tensor) + " into local tensor " +
                                                  std::to_string(bound.local) + " of " +
                                                  std::to_string(bindings.locals.size()));
    }
    const LocalTensor& local = bindings.locals[bound.local];
    const std::string where = receiver + " binds region " + format(bound.region) + " of " + named(tensor);
    if (bound.region.offset.size() != tensor.shape.size() || bound.region.extent.size() != tensor.shape.size()) {
      return fail(RegionError::RankMismatch,
                  where + ": the region has " + std::to_string(bound.region.offset.size()) + " dimensions");
    }
    if (!boxWithin(bound.region, tensor.shape)) {
      return fail(RegionError::OutsideTensor, where + ": the region is outside the tensor (no source holds it)");
    }
    if (local.dtype != tensor.dtype) {
      return fail(RegionError::DTypeMismatch, where + " into local " + quoted(local.name) + ": checkpoint dtype " +
                                                  std::string(safetensorsName(tensor.dtype)) + ", local " +
                                                  std::string(safetensorsName(local.dtype)));
    }
    const Box place{bound.localOffset, bound.localExtent};
    if (!boxWithin(place, local.shape)) {
      return fail(RegionError::OutsideTensor, where + " into " + format(place) + " of local " + quoted(local.name) +
                                                  " " + formatShape(local.shape) + ", outside it");
    }
    if (!sameElementOrder(bound.region.extent, bound.localExtent)) {
      return fail(RegionError::ShapeMismatch,
                  where + " into " + format(place) + " of local " + quoted(local.name) + ": the extents differ");
    }
    byLocal[bound.local].push_back(&bound);
  }
  for (std::size_t index = 0; index < bindings.locals.size(); ++index) {
    const LocalTensor& local = bindings.locals[index];
    std::vector<Box> places;
    for (const BoundRegion* bound : byLocal[index]) places.push_back(Box{bound->localOffset, bound->localExtent});
    std::vector<const Box*> boxes;
    for (const Box& place : places) boxes.push_back(&place);
    if (const auto pair = firstOverlap(boxes)) {
      const BoundRegion& a = *byLocal[index][pair->first];
      const BoundRegion& b = *byLocal[index][pair->second];
      return fail(RegionError::Overlap, receiver + " binds region " + format(a.region) + " of " + quoted(a.tensor) +
                                            " and region " + format(b.region) + " of " + quoted(b.tensor) +
                                            " into local " + quoted(local.name) + ", overlapping in " +
                                            format(intersect(places[pair->first], places[pair->second])));
    }
    std::uint64_t filled = 0;
    for (const Box& place : places) filled += volume(place);
    const std::uint64_t whole = volume(wholeBox(local.shape));
    if (filled != whole) {
      const auto gap = uncoveredBox(local.shape, boxes);
      return fail(
          RegionError::Gap,
          receiver + ": no bound region fills " +
              (gap ? format(*gap) : std::to_string(whole - filled) + " of the " + std::to_string(whole) + " elements") +
              " of local " + quoted(local.name) + " " + formatShape(local.shape));
    }
  }
  return tensors;
}

Digest digestOf(const SourceHoldings& holdings) {
  StreamDigest stream;
  const std::uint64_t count = holdings.regions.size();
  stream.add(&count, sizeof count);
  for (const HeldRegion& held : holdings.regions) {
    stream.add(&held.tensor, sizeof held.tensor);
    addBox(stream, held.box);
  }
  return stream.digest();
}

Digest digestOf(const ReceiverBindings& bindings) {
  StreamDigest stream;
  const std::uint64_t locals = bindings.locals.size();
  stream.add(&locals, sizeof locals);
  for (const LocalTensor& local : bindings.locals) {
    const std::uint64_t length = local.name.size();
    stream.add(&length, sizeof length);
    stream.add(local.name.data(), local.name.size());
    stream.add(&local.dtype, sizeof local.dtype);
    addInts(stream, local.shape);
  }
  const std::uint64_t regions = bindings.regions.size();
  stream.add(&regions, sizeof regions);
  for (const BoundRegion& bound : bindings.regions) {
    const std::uint64_t length = bound.tensor.size();
    stream.add(&length, sizeof length);
    stream.add(bound.tensor.data(), bound.tensor.size());
    addBox(stream, bound.region);
    stream.add(&bound.local, sizeof bound.local);
    addInts(stream, bound.localOffset);
    addInts(stream, bound.localExtent);
  }
  return stream.digest();
}

}  // namespace wsync::bus
