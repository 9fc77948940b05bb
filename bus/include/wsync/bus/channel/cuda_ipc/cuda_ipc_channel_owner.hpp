#pragma once
// The coordinator's side of the cuda_ipc channel: the segment holding the sender's exported handles and the
// receivers' reports, created at the first cuda_ipc round ("wsync-<euid>-<bus>-ipc", mode 0600). It lives in this
// host's shared memory and CUDA IPC handles open only on the host that made them: every member must be on the
// coordinator's host. Nothing here needs a GPU.
#include <memory>
#include <string>

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
  void abort(std::uint64_t round, bool transferBegun) override;

 private:
  std::string busName_;
  std::unique_ptr<CudaIpcSegment> segment_;
};

}  // namespace wsync::bus::gpu
