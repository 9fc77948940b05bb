#include "wsync/cli/model_layouts.hpp"

#include <algorithm>
#include <charconv>

namespace wsync::cli {

tl::expected<Part, std::string> parsePart(std::string_view text) {
  const auto slash = text.find('/');
  Part part;
  auto number = [](std::string_view digits, std::uint32_t& value) {
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return error == std::errc() && end == digits.data() + digits.size() && !digits.empty();
  };
  if (slash == std::string_view::npos || !number(text.substr(0, slash), part.rank) ||
      !number(text.substr(slash + 1), part.count) || part.count == 0 || part.count > bus::kMaxSources ||
      part.rank >= part.count) {
    return tl::unexpected("'" + std::string(text) +
                          "': write RANK/COUNT, 0 <= RANK < COUNT <= " + std::to_string(bus::kMaxSources));
  }
  return part;
}

std::pair<std::int64_t, std::int64_t> partRange(std::int64_t extent, Part part) {
  const std::int64_t base = extent / part.count;
  const std::int64_t longer = extent % part.count;  // the first `longer` parts take one more
  const std::int64_t rank = part.rank;
  const std::int64_t begin = rank * base + std::min(rank, longer);
  return {begin, begin + base + (rank < longer ? 1 : 0)};
}

bus::SourceHoldings rowShards(std::span<const bus::TensorSpec> tensors, Part part) {
  bus::SourceHoldings holdings;
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const auto& shape = tensors[index].shape;
    bus::Box box = bus::wholeBox(shape);
    if (!shape.empty()) {
      const auto [begin, end] = partRange(shape[0], part);
      if (begin == end) continue;
      box.offset[0] = begin;
      box.extent[0] = end - begin;
    }
    holdings.regions.push_back(bus::HeldRegion{static_cast<std::uint32_t>(index), std::move(box)});
  }
  return holdings;
}

std::vector<std::span<const std::byte>> shardViews(const bus::SourceHoldings& holdings,
                                                   std::span<const bus::TensorSpec> tensors,
                                                   std::span<const std::span<const std::byte>> buffers) {
  std::vector<std::span<const std::byte>> views;
  for (const bus::HeldRegion& held : holdings.regions) {
    const auto& shape = tensors[held.tensor].shape;
    const std::span<const std::byte> whole = buffers[held.tensor];
    if (shape.empty() || shape[0] == 0) {
      views.push_back(whole);
      continue;
    }
    const std::size_t rowBytes = whole.size() / static_cast<std::size_t>(shape[0]);
    views.push_back(whole.subspan(static_cast<std::size_t>(held.box.offset[0]) * rowBytes,
                                  static_cast<std::size_t>(held.box.extent[0]) * rowBytes));
  }
  return views;
}

std::vector<SlicedTensor> columnSlices(std::span<const bus::TensorSpec> tensors, Part part) {
  std::vector<SlicedTensor> slices;
  for (const bus::TensorSpec& tensor : tensors) {
    SlicedTensor slice{tensor, bus::wholeBox(tensor.shape), false};
    if (!tensor.shape.empty() && tensor.shape.back() >= static_cast<std::int64_t>(part.count) && part.count > 1) {
      const auto [begin, end] = partRange(tensor.shape.back(), part);
      slice.region.offset.back() = begin;
      slice.region.extent.back() = end - begin;
      slice.local.shape.back() = end - begin;
      slice.sliced = true;
    }
    slices.push_back(std::move(slice));
  }
  return slices;
}

}  // namespace wsync::cli
