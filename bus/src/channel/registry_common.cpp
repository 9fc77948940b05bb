// The parts of registry.hpp that are the same in every build: the shm channel, the names; the GPU channels come
// from gpu_registry.hpp.
#include "wsync/bus/channel/registry.hpp"

#include "channel/gpu_registry.hpp"
#include "wsync/bus/channel/shm/shm_channel.hpp"
#include "wsync/bus/channel/shm/shm_channel_owner.hpp"

namespace wsync::bus {

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openChannel(const msg::TransferPlan& plan,
                                                                   const ChannelSetup& setup) {
  if (plan.channel() != msg::ChannelKind::Shm) return openGpuChannel(plan, setup);
  if (plan.arena() == nullptr || plan.arena()->size() == 0) {
    return fail(ChannelError::NoArena, "the shm plan names no arena");
  }
  auto channel = ShmChannel::open(plan.arena()->str());
  if (!channel) return tl::unexpected(channel.error());
  (*channel)->setCancelProbe(setup.cancelProbe);
  return std::unique_ptr<Channel>(std::move(*channel));
}

tl::expected<std::vector<std::unique_ptr<ChannelOwner>>, ChannelFailure> createChannelOwners(
    const ChannelOwnersConfig& config) {
  auto shm = ShmChannelOwner::create(
      config.busName,
      ArenaGeometry{config.hostBucketBytes, config.bufferCount, static_cast<std::uint32_t>(kMaxArenaReceivers)});
  if (!shm) return tl::unexpected(shm.error());
  std::vector<std::unique_ptr<ChannelOwner>> owners;
  owners.push_back(std::move(*shm));
  for (auto& owner : gpuChannelOwners(config)) owners.push_back(std::move(owner));
  return owners;
}

TensorMemory channelMemory(msg::ChannelKind kind) {
  return kind == msg::ChannelKind::Shm ? TensorMemory::Host : TensorMemory::Device;
}

std::string channelName(msg::ChannelKind kind) {
  switch (kind) {
    case msg::ChannelKind::Shm: return "shm";
    case msg::ChannelKind::Nccl: return "nccl";
    case msg::ChannelKind::CudaIpc: return "cuda_ipc";
  }
  return msg::EnumNameChannelKind(kind);
}

std::optional<msg::ChannelKind> parseChannelName(std::string_view name) {
  for (const msg::ChannelKind kind : msg::EnumValuesChannelKind()) {
    if (channelName(kind) == name) return kind;
  }
  return std::nullopt;
}

}  // namespace wsync::bus
