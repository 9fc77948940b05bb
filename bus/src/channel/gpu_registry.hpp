#pragma once
// What registry.hpp needs from the GPU channels, compiled from registry_gpu.cpp in a build with CUDA and from
// registry_host.cpp (refusing, naming the missing toolkit) in one without. registry_common.cpp does the shm channel
// and asks these for the rest.
#include <memory>
#include <vector>

#include "wsync/bus/channel/registry.hpp"

namespace wsync::bus {

// Opens the nccl or cuda_ipc channel `plan` names.
tl::expected<std::unique_ptr<Channel>, ChannelFailure> openGpuChannel(const msg::TransferPlan& plan,
                                                                      const ChannelSetup& setup);
// The coordinator's owners of the nccl and cuda_ipc channels.
std::vector<std::unique_ptr<ChannelOwner>> gpuChannelOwners(const ChannelOwnersConfig& config);

}  // namespace wsync::bus
