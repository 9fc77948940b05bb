#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel_owner.hpp"

#include "wsync/bus/core/segment_name.hpp"

namespace wsync::bus::gpu {

tl::expected<ChannelGrant, std::string> CudaIpcChannelOwner::prepare(const ChannelMember& /*sender*/,
                                                                     std::span<const ChannelMember> receivers) {
  if (receivers.empty()) return ChannelGrant{};  // nobody copies: no segment
  if (!segment_) {
    IpcGeometry geometry;
    geometry.maxReceivers = kMaxIpcReceivers;
    auto segment = CudaIpcSegment::create(segmentName(busName_, "ipc"), geometry);
    if (!segment) return tl::unexpected("cannot create the cuda_ipc segment: " + segment.error().describe());
    segment_ = std::move(*segment);
  }
  ChannelGrant grant;
  grant.segment = segment_->name();
  return grant;
}

void CudaIpcChannelOwner::abort(std::uint64_t round, bool /*transferBegun*/) {
  if (segment_) segment_->abort(round);
}

}  // namespace wsync::bus::gpu
