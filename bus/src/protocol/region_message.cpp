#include "wsync/bus/protocol/region_message.hpp"

namespace wsync::bus {
namespace {

using Longs = flatbuffers::Vector<std::int64_t>;

std::vector<std::int64_t> longsOf(const Longs* values) {
  if (values == nullptr) return {};
  return std::vector<std::int64_t>(values->begin(), values->end());
}

// A box from its two lists: as long as each other and at most kMaxTensorRank; the rest is checked against its
// tensor (checkHoldings, checkBindings).
tl::expected<Box, RegionFailure> boxOf(const Longs* offset, const Longs* extent, const std::string& what) {
  Box box{longsOf(offset), longsOf(extent)};
  if (box.offset.size() != box.extent.size() || box.offset.size() > kMaxTensorRank) {
    return fail(RegionError::RankMismatch, what + " has " + std::to_string(box.offset.size()) + " offsets and " +
                                               std::to_string(box.extent.size()) + " extents (at most " +
                                               std::to_string(kMaxTensorRank) + " dimensions)");
  }
  return box;
}

}  // namespace

flatbuffers::Offset<msg::Holdings> toMessage(flatbuffers::FlatBufferBuilder& fbb, const SourceHoldings& holdings,
                                             const Digest& manifest) {
  std::vector<flatbuffers::Offset<msg::Region>> regions;
  regions.reserve(holdings.regions.size());
  for (const HeldRegion& held : holdings.regions) {
    regions.push_back(msg::CreateRegionDirect(fbb, held.tensor, &held.box.offset, &held.box.extent));
  }
  const msg::Digest128 digest = toMessage(digestOf(holdings));
  const msg::Digest128 manifestDigest = toMessage(manifest);
  return msg::CreateHoldingsDirect(fbb, &digest, &manifestDigest, &regions);
}

flatbuffers::Offset<msg::Bindings> toMessage(flatbuffers::FlatBufferBuilder& fbb, const ReceiverBindings& bindings) {
  std::vector<flatbuffers::Offset<msg::LocalTensorInfo>> locals;
  locals.reserve(bindings.locals.size());
  for (const LocalTensor& local : bindings.locals) {
    // With its length, not as a C string: the wire form must hold exactly the bytes the digest covers.
    locals.push_back(msg::CreateLocalTensorInfo(fbb, fbb.CreateString(local.name.data(), local.name.size()),
                                                local.dtype, fbb.CreateVector(local.shape)));
  }
  std::vector<flatbuffers::Offset<msg::BoundRegionInfo>> regions;
  regions.reserve(bindings.regions.size());
  for (const BoundRegion& bound : bindings.regions) {
    regions.push_back(msg::CreateBoundRegionInfo(
        fbb, fbb.CreateString(bound.tensor.data(), bound.tensor.size()), fbb.CreateVector(bound.region.offset),
        fbb.CreateVector(bound.region.extent), bound.local, fbb.CreateVector(bound.localOffset),
        fbb.CreateVector(bound.localExtent)));
  }
  const msg::Digest128 digest = toMessage(digestOf(bindings));
  return msg::CreateBindingsDirect(fbb, &digest, &locals, &regions);
}

tl::expected<DecodedHoldings, RegionFailure> holdingsFromMessage(const msg::Holdings& message) {
  DecodedHoldings decoded;
  if (message.regions() != nullptr) {
    if (message.regions()->size() > kMaxRegionsPerAgent) {
      return fail(RegionError::TooLarge, "holdings of " + std::to_string(message.regions()->size()) +
                                             " regions, at most " + std::to_string(kMaxRegionsPerAgent));
    }
    decoded.holdings.regions.reserve(message.regions()->size());
    for (const msg::Region* region : *message.regions()) {
      auto box =
          boxOf(region->offset(), region->extent(), "held region " + std::to_string(decoded.holdings.regions.size()));
      if (!box) return tl::unexpected(std::move(box.error()));
      decoded.holdings.regions.push_back(HeldRegion{region->tensor(), std::move(*box)});
    }
  }
  decoded.digest = message.digest() != nullptr ? fromMessage(*message.digest()) : Digest{};
  decoded.manifest = message.manifest_digest() != nullptr ? fromMessage(*message.manifest_digest()) : Digest{};
  if (digestOf(decoded.holdings) != decoded.digest) {
    return fail(RegionError::SourceMismatch, "the holdings' regions do not hash to the digest sent with them");
  }
  return decoded;
}

tl::expected<ReceiverBindings, RegionFailure> bindingsFromMessage(const msg::Bindings& message) {
  ReceiverBindings bindings;
  const std::size_t localCount = message.locals() != nullptr ? message.locals()->size() : 0;
  const std::size_t regionCount = message.regions() != nullptr ? message.regions()->size() : 0;
  if (localCount > kMaxLocalTensors || regionCount > kMaxRegionsPerAgent) {
    return fail(RegionError::TooLarge, "bindings of " + std::to_string(regionCount) + " regions into " +
                                           std::to_string(localCount) + " local tensors, at most " +
                                           std::to_string(kMaxRegionsPerAgent) + " and " +
                                           std::to_string(kMaxLocalTensors));
  }
  bindings.locals.reserve(localCount);
  for (std::size_t index = 0; index < localCount; ++index) {
    const msg::LocalTensorInfo* local = message.locals()->Get(static_cast<flatbuffers::uoffset_t>(index));
    LocalTensor tensor{local->name()->str(), local->dtype(), longsOf(local->shape())};
    if (tensor.shape.size() > kMaxTensorRank) {
      return fail(RegionError::InvalidBinding,
                  "local tensor '" + tensor.name + "' has " + std::to_string(tensor.shape.size()) + " dimensions");
    }
    bindings.locals.push_back(std::move(tensor));
  }
  bindings.regions.reserve(regionCount);
  for (std::size_t index = 0; index < regionCount; ++index) {
    const msg::BoundRegionInfo* bound = message.regions()->Get(static_cast<flatbuffers::uoffset_t>(index));
    const std::string what = "bound region " + std::to_string(index);
    auto region = boxOf(bound->offset(), bound->extent(), what);
    if (!region) return tl::unexpected(std::move(region.error()));
    auto place = boxOf(bound->local_offset(), bound->local_extent(), what + "'s place");
    if (!place) return tl::unexpected(std::move(place.error()));
    bindings.regions.push_back(BoundRegion{bound->tensor()->str(), std::move(*region), bound->local(),
                                           std::move(place->offset), std::move(place->extent)});
  }
  const Digest claimed = message.digest() != nullptr ? fromMessage(*message.digest()) : Digest{};
  if (digestOf(bindings) != claimed) {
    return fail(RegionError::InvalidBinding, "the bindings do not hash to the digest sent with them");
  }
  return bindings;
}

}  // namespace wsync::bus
