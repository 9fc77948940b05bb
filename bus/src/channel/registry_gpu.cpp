// wsync::channels in a build with CUDA: the nccl and cuda_ipc channels (gpu_registry.hpp).
#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda_runtime_api.h>

#include "channel/gpu/cuda_check.hpp"
#include "channel/gpu_registry.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel_owner.hpp"
#include "wsync/bus/channel/nccl/nccl_channel.hpp"
#include "wsync/bus/channel/nccl/nccl_channel_owner.hpp"

namespace wsync::bus {

namespace {

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openNccl(const msg::TransferPlan& plan,
                                                                const ChannelSetup& setup) {
  if (plan.nccl_unique_id() == nullptr || plan.nccl_unique_id()->size() != gpu::kNcclUniqueIdBytes) {
    return fail(ChannelError::InvalidGeometry,
                "the nccl plan carries a unique id of " +
                    std::to_string(plan.nccl_unique_id() ? plan.nccl_unique_id()->size() : 0) + " bytes, not " +
                    std::to_string(gpu::kNcclUniqueIdBytes));
  }
  gpu::NcclChannelConfig config;
  std::memcpy(config.uniqueId.data(), plan.nccl_unique_id()->data(), gpu::kNcclUniqueIdBytes);
  config.rank = plan.nccl_rank();
  config.worldSize = plan.nccl_world_size();
  config.bufferCount = plan.buffer_count();
  // A region round's steps stage what a broadcast's slices do: the round's bucket over the slices per bucket.
  config.regionStepBytes = plan.bucket_bytes() / gpu::kNcclSlicesPerBucket;
  config.cancelProbe = setup.cancelProbe;
  auto enqueue = gpu::agentNcclEnqueue(std::getenv(gpu::kNcclEnqueueVariable));
  if (!enqueue) return tl::unexpected(enqueue.error());
  config.enqueue = *enqueue;
  auto channel = gpu::NcclChannel::open(config, setup.deadline);
  if (!channel) return tl::unexpected(channel.error());
  (*channel)->setCancelProbe(setup.cancelProbe);
  return std::unique_ptr<Channel>(std::move(*channel));
}

}  // namespace

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openGpuChannel(const msg::TransferPlan& plan,
                                                                      const ChannelSetup& setup) {
  const bool named = plan.arena() != nullptr && plan.arena()->size() != 0;
  if (gpu::visibleDeviceCount() == 0) {
    return fail(ChannelError::Unsupported,
                "channel " + channelName(plan.channel()) + " needs a GPU and this process sees none");
  }
  WSYNC_CUDA_TRY(cudaSetDevice(setup.cudaDevice));
  if (plan.channel() == msg::ChannelKind::Nccl) return openNccl(plan, setup);
  if (plan.channel() != msg::ChannelKind::CudaIpc) {
    return fail(ChannelError::Unsupported, "channel " + channelName(plan.channel()) + " is unknown to this build");
  }
  if (!named) return fail(ChannelError::NoArena, "the cuda_ipc plan names no segment");
  auto channel = gpu::CudaIpcChannel::open(plan.arena()->str());
  if (!channel) return tl::unexpected(channel.error());
  (*channel)->setCancelProbe(setup.cancelProbe);
  (*channel)->setAgentId(setup.agentId);
  return std::unique_ptr<Channel>(std::move(*channel));
}

std::vector<msg::ChannelKind> buildChannels() {
  return {msg::ChannelKind::Shm, msg::ChannelKind::Tcp, msg::ChannelKind::Nccl, msg::ChannelKind::CudaIpc};
}

std::vector<std::unique_ptr<ChannelOwner>> gpuChannelOwners(const ChannelOwnersConfig& config) {
  std::vector<std::unique_ptr<ChannelOwner>> owners;
  owners.push_back(std::make_unique<gpu::NcclChannelOwner>());
  owners.push_back(std::make_unique<gpu::CudaIpcChannelOwner>(config.busName));
  return owners;
}

}  // namespace wsync::bus
