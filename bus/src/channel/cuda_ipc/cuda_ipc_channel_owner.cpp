#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel_owner.hpp"

#include "wsync/bus/core/segment_name.hpp"

namespace wsync::bus::gpu {
namespace {

// Sources one region round takes: as many as the shm channel's rings (one segment each here, of some MiB of tables).
constexpr std::size_t kMaxIpcSources = 64;

IpcGeometry ownerGeometry() {
  IpcGeometry geometry;
  geometry.maxReceivers = kMaxIpcReceivers;
  return geometry;
}

}  // namespace

tl::expected<void, std::string> CudaIpcChannelOwner::ensureSegment() {
  if (segment_) return {};
  auto segment = CudaIpcSegment::create(segmentName(busName_, "ipc"), ownerGeometry());
  if (!segment) return tl::unexpected("cannot create the cuda_ipc segment: " + segment.error().describe());
  segment_ = std::move(*segment);
  return {};
}

tl::expected<ChannelGrant, std::string> CudaIpcChannelOwner::prepare(const ChannelMember& /*sender*/,
                                                                     std::span<const ChannelMember> receivers) {
  if (receivers.empty()) return ChannelGrant{};  // nobody copies: no segment
  if (auto made = ensureSegment(); !made) return tl::unexpected(made.error());
  ChannelGrant grant;
  grant.segment = segment_->name();
  return grant;
}

tl::expected<ChannelGrant, std::string> CudaIpcChannelOwner::prepareSources(std::span<const ChannelMember> senders,
                                                                            std::span<const ChannelMember> receivers) {
  if (senders.size() > kMaxIpcSources) {
    return tl::unexpected(std::to_string(senders.size()) + " sources exceed the cuda_ipc channel's " +
                          std::to_string(kMaxIpcSources) + " (one segment each)");
  }
  if (receivers.size() > kMaxIpcReceivers) {
    return tl::unexpected(std::to_string(receivers.size()) + " workers exceed the cuda_ipc channel's " +
                          std::to_string(kMaxIpcReceivers) + " receivers");
  }
  if (auto made = ensureSegment(); !made) return tl::unexpected(made.error());
  while (sourceSegments_.size() < senders.size()) {
    const auto source = static_cast<std::uint32_t>(sourceSegments_.size());
    auto segment = CudaIpcSegment::create(cudaIpcSourceSegmentName(segment_->name(), source), ownerGeometry());
    if (!segment) {
      return tl::unexpected("cannot create source " + std::to_string(source) +
                            "'s cuda_ipc segment: " + segment.error().describe());
    }
    sourceSegments_.push_back(std::move(*segment));
  }
  ChannelGrant grant;
  grant.segment = segment_->name();
  return grant;
}

void CudaIpcChannelOwner::abort(std::uint64_t round, bool /*transferBegun*/) {
  if (segment_) segment_->abort(round);
  for (const auto& segment : sourceSegments_) segment->abort(round);
}

}  // namespace wsync::bus::gpu
