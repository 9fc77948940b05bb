#pragma once
// Layouts of sharded sources and sliced receivers for the tests of the region plan and of the channels that carry
// it: plans built with named agents, the checkpoint's bytes, each source's buffers cut from it, a check that a
// receiver's local tensors hold exactly the elements its bindings name, and random layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::test {

inline std::vector<std::string> names(const char* prefix, std::size_t count) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(std::string(prefix) + " " + std::to_string(i));
  return out;
}

inline tl::expected<bus::RegionPlan, bus::RegionFailure> planOf(const bus::Manifest& manifest,
                                                                std::vector<bus::SourceHoldings> sources,
                                                                std::vector<bus::ReceiverBindings> receivers) {
  const auto sourceNames = names("source", sources.size());
  const auto receiverNames = names("receiver", receivers.size());
  return bus::RegionPlan::build(manifest, std::move(sources), std::move(receivers), sourceNames, receiverNames);
}

// Calls visit(index) for every index of `box` in row-major order.
inline void forEachIndex(const bus::Box& box, const std::function<void(const std::vector<std::int64_t>&)>& visit) {
  if (bus::volume(box) == 0) return;
  std::vector<std::int64_t> at = box.offset;
  while (true) {
    visit(at);
    std::size_t d = at.size();
    while (true) {
      if (d == 0) return;
      --d;
      if (++at[d] < box.offset[d] + box.extent[d]) break;
      at[d] = box.offset[d];
    }
  }
}

inline std::uint64_t linear(std::span<const std::int64_t> shape, const std::vector<std::int64_t>& index) {
  std::uint64_t element = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    element = element * static_cast<std::uint64_t>(shape[d]) + static_cast<std::uint64_t>(index[d]);
  }
  return element;
}

// The byte at `offset` of checkpoint tensor `tensor`: distinct across tensors and positions.
inline std::byte checkpointByte(std::uint32_t tensor, std::uint64_t offset) {
  return static_cast<std::byte>((tensor * 131 + offset * 7 + offset / 251) & 0xFF);
}

// Each source's buffers (indexed like its holdings' regions), cut from the checkpoint: [source][region].
inline std::vector<std::vector<std::vector<std::byte>>> sourceBuffers(const bus::Manifest& manifest,
                                                                      const bus::RegionPlan& plan) {
  std::vector<std::vector<std::vector<std::byte>>> buffers(plan.sourceCount());
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
    for (const bus::HeldRegion& held : plan.holdings(s).regions) {
      const bus::TensorSpec& spec = manifest.tensors()[held.tensor];
      const std::size_t element = bus::elementBytes(spec.dtype);
      std::vector<std::byte> buffer;
      buffer.reserve(bus::volume(held.box) * element);
      forEachIndex(held.box, [&](const std::vector<std::int64_t>& index) {
        const std::uint64_t at = linear(spec.shape, index) * element;
        for (std::size_t b = 0; b < element; ++b) buffer.push_back(checkpointByte(held.tensor, at + b));
      });
      buffers[s].push_back(std::move(buffer));
    }
  }
  return buffers;
}

// Zeroed local tensors of a receiver's bindings.
inline std::vector<std::vector<std::byte>> localsOf(const bus::ReceiverBindings& bindings) {
  std::vector<std::vector<std::byte>> locals;
  for (const bus::LocalTensor& local : bindings.locals) {
    locals.emplace_back(bus::volume(bus::wholeBox(local.shape)) * bus::elementBytes(local.dtype), std::byte{0});
  }
  return locals;
}

inline std::uint32_t indexOf(const bus::Manifest& manifest, const std::string& name) {
  for (std::uint32_t index = 0; index < manifest.size(); ++index) {
    if (manifest.tensors()[index].name == name) return index;
  }
  ADD_FAILURE() << "no tensor '" << name << "'";
  return 0;
}

// Checks that `locals` (a receiver's local tensors) hold exactly the checkpoint elements `bindings` name.
inline void expectBoundElements(const bus::Manifest& manifest, const bus::ReceiverBindings& bindings,
                                const std::vector<std::vector<std::byte>>& locals, const std::string& receiver) {
  ASSERT_EQ(locals.size(), bindings.locals.size()) << receiver;
  for (const bus::BoundRegion& bound : bindings.regions) {
    const std::uint32_t tensor = indexOf(manifest, bound.tensor);
    const bus::TensorSpec& spec = manifest.tensors()[tensor];
    const bus::LocalTensor& local = bindings.locals[bound.local];
    const std::size_t element = bus::elementBytes(spec.dtype);
    std::vector<std::uint64_t> expected;  // checkpoint byte offsets, in the region's order
    forEachIndex(bound.region, [&](const std::vector<std::int64_t>& index) {
      expected.push_back(linear(spec.shape, index) * element);
    });
    std::size_t next = 0;
    forEachIndex(bus::Box{bound.localOffset, bound.localExtent}, [&](const std::vector<std::int64_t>& index) {
      const std::uint64_t at = linear(local.shape, index) * element;
      for (std::size_t b = 0; b < element; ++b) {
        ASSERT_EQ(locals[bound.local][at + b], checkpointByte(tensor, expected[next] + b))
            << receiver << " local " << local.name << " region " << bus::format(bound.region) << " byte " << at + b;
      }
      ++next;
    });
  }
}

struct RegionLayout {
  bus::Manifest manifest;
  std::vector<bus::SourceHoldings> sources;
  std::vector<bus::ReceiverBindings> receivers;
};

// A random layout: tensors of rank 0 to 3 (dimensions 1 to `maxDim`) held by 1 to 4 sources in dim-k ranges
// (uneven, some empty, some replicated), bound by 1 to 3 receivers whole, as a slice along any dimension, as two
// slices in swapped order (a fused tensor), stacked under a leading dimension of 1, or not at all.
inline RegionLayout randomLayout(std::mt19937& random, std::int64_t maxDim) {
  using namespace bus;
  auto uniform = [&](std::int64_t low, std::int64_t high) {
    return std::uniform_int_distribution<std::int64_t>(low, high)(random);
  };
  const msg::DType dtypes[] = {msg::DType::U8, msg::DType::BF16, msg::DType::F32};
  std::vector<TensorSpec> tensors;
  const auto tensorCount = uniform(1, 6);
  for (std::int64_t t = 0; t < tensorCount; ++t) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(uniform(0, 3)));
    for (auto& dim : shape) dim = uniform(1, maxDim);
    tensors.push_back({"t" + std::to_string(t), dtypes[uniform(0, 2)], shape});
  }
  RegionLayout layout{*Manifest::create(tensors), {}, {}};
  const Manifest& manifest = layout.manifest;
  const auto sourceCount = static_cast<std::uint32_t>(uniform(1, 4));
  auto& sources = layout.sources;
  sources.resize(sourceCount);
  for (std::uint32_t t = 0; t < manifest.size(); ++t) {
    const auto& shape = manifest.tensors()[t].shape;
    if (shape.empty() || uniform(0, 3) == 0) {  // replicated whole on some sources (at least one)
      const auto first = static_cast<std::uint32_t>(uniform(0, sourceCount - 1));
      for (std::uint32_t s = 0; s < sourceCount; ++s) {
        if (s == first || uniform(0, 1) == 1) sources[s].regions.push_back(HeldRegion{t, wholeBox(shape)});
      }
      continue;
    }
    const auto dim = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(shape.size()) - 1));
    std::vector<std::int64_t> cuts = {0, shape[dim]};
    for (std::uint32_t s = 1; s < sourceCount; ++s) cuts.push_back(uniform(0, shape[dim]));
    std::sort(cuts.begin(), cuts.end());
    for (std::uint32_t s = 0; s + 1 < cuts.size(); ++s) {
      Box box = wholeBox(shape);
      box.offset[dim] = cuts[s];
      box.extent[dim] = cuts[s + 1] - cuts[s];
      if (box.extent[dim] == 0) continue;
      sources[s].regions.push_back(HeldRegion{t, box});
      const auto replica = static_cast<std::uint32_t>(uniform(0, sourceCount - 1));
      if (replica != s && uniform(0, 2) == 0) sources[replica].regions.push_back(HeldRegion{t, box});
    }
  }
  const auto receiverCount = static_cast<std::uint32_t>(uniform(1, 3));
  auto& receivers = layout.receivers;
  receivers.resize(receiverCount);
  for (auto& bindings : receivers) {
    for (std::uint32_t t = 0; t < manifest.size(); ++t) {
      const TensorSpec& spec = manifest.tensors()[t];
      const auto local = static_cast<std::uint32_t>(bindings.locals.size());
      const std::string name = spec.name + "_local";
      const auto form = uniform(0, 4);
      if (form == 0) continue;
      if (form == 1 || spec.shape.empty()) {
        const Box whole = wholeBox(spec.shape);
        bindings.locals.push_back({name, spec.dtype, spec.shape});
        bindings.regions.push_back({spec.name, whole, local, whole.offset, whole.extent});
        continue;
      }
      const auto dim = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(spec.shape.size()) - 1));
      const std::int64_t begin = uniform(0, spec.shape[dim] - 1);
      const std::int64_t end = uniform(begin + 1, spec.shape[dim]);
      Box slice = wholeBox(spec.shape);
      slice.offset[dim] = begin;
      slice.extent[dim] = end - begin;
      if (form == 2) {  // a TP slice
        bindings.locals.push_back({name, spec.dtype, slice.extent});
        bindings.regions.push_back(
            {spec.name, slice, local, std::vector<std::int64_t>(slice.extent.size(), 0), slice.extent});
      } else if (form == 3) {  // stacked under a leading 1: an expert of a stack
        std::vector<std::int64_t> stacked = {1};
        stacked.insert(stacked.end(), slice.extent.begin(), slice.extent.end());
        bindings.locals.push_back({name, spec.dtype, stacked});
        bindings.regions.push_back({spec.name, slice, local, std::vector<std::int64_t>(stacked.size(), 0), stacked});
      } else {  // the slice in two halves, the second first: two regions into one fused local tensor
        const std::int64_t split = uniform(begin, end);
        Box low = slice;
        low.extent[dim] = split - begin;
        Box high = slice;
        high.offset[dim] = split;
        high.extent[dim] = end - split;
        bindings.locals.push_back({name, spec.dtype, slice.extent});
        std::vector<std::int64_t> highAt(slice.extent.size(), 0);
        std::vector<std::int64_t> lowAt(slice.extent.size(), 0);
        lowAt[dim] = end - split;
        bindings.regions.push_back({spec.name, high, local, highAt, high.extent});
        bindings.regions.push_back({spec.name, low, local, lowAt, low.extent});
      }
    }
  }
  return layout;
}

}  // namespace wsync::test
