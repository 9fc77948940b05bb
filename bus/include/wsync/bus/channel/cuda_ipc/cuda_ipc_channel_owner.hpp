#pragma once
// The coordinator's side of the cuda_ipc channel: the segment holding the sender's exported handles and the
// receivers' reports, created at the first cuda_ipc round ("wsync-<euid>-<bus>-ipc", mode 0600). It lives in this
// host's shared memory and CUDA IPC handles open only on the host that made them: every member must be on the
// coordinator's host. Nothing here needs a GPU.
#include <memory>
#include <string>
#include <vector>

#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp"

namespace wsync::bus::gpu {

class CudaIpcChannelOwner final : public ChannelOwner {
 public:
  explicit CudaIpcChannelOwner(std::string busName) : busName_(std::move(busName)) {}

  msg::ChannelKind kind() const override { return msg::ChannelKind::CudaIpc; }
  TensorMemory tensorMemory() const override { return TensorMemory::Device; }
  std::uint32_t maxReceivers() const override { return kMaxIpcReceivers; }
  // Handles to one GPU's memory, kept in a segment on the coordinator's host.
  bool crossesHosts() const override { return false; }
  tl::expected<ChannelGrant, std::string> prepare(const ChannelMember& sender,
                                                  std::span<const ChannelMember> receivers) override;
  // A region round: the bus's segment, which names the round, and one more per source
  // (cudaIpcSourceSegmentName), made at the first round that has that many sources and kept, as the bus's is.
  tl::expected<ChannelGrant, std::string> prepareSources(std::span<const ChannelMember> senders,
                                                         std::span<const ChannelMember> receivers) override;
  void abort(std::uint64_t round, bool transferBegun) override;
  // Source segments made so far.
  std::size_t sourceSegmentCount() const { return sourceSegments_.size(); }

 private:
  tl::expected<void, std::string> ensureSegment();

  std::string busName_;
  std::unique_ptr<CudaIpcSegment> segment_;
  std::vector<std::unique_ptr<CudaIpcSegment>> sourceSegments_;
};

}  // namespace wsync::bus::gpu
