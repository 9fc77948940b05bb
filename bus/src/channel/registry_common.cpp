// The parts of registry.hpp that are the same in every build: the host channels (shm, tcp), the listeners, the
// names; the GPU channels come from gpu_registry.hpp.
#include "wsync/bus/channel/registry.hpp"

#include <algorithm>

#include "channel/gpu_registry.hpp"
#include "wsync/bus/channel/shm/shm_channel.hpp"
#include "wsync/bus/channel/shm/shm_channel_owner.hpp"
#include "wsync/bus/channel/tcp/tcp_address.hpp"
#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/channel/tcp/tcp_channel_owner.hpp"
#include "wsync/bus/channel/tcp/tcp_listener.hpp"

namespace wsync::bus {

namespace {

// The listeners of this build's channels: the tcp channel's, when the agent sends on it.
class BuildListeners final : public ChannelListeners {
 public:
  const std::vector<ChannelContact>& contacts() const override { return contacts_; }

  std::shared_ptr<TcpListener> tcp;
  std::vector<ChannelContact> contacts_;
};

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openTcp(const msg::TransferPlan& plan,
                                                               const ChannelSetup& setup) {
  TcpChannelConfig config;
  if (const auto* token = plan.nccl_unique_id(); token != nullptr) config.token.assign(token->begin(), token->end());
  if (plan.regions()) {
    // Every source's contact, in source order: a receiver reaches each, a source only admits.
    if (const auto* contacts = plan.source_contacts(); contacts != nullptr) {
      for (const auto* contact : *contacts) config.sourceContacts.push_back(contact->str());
    }
    if (config.sourceContacts.empty() && plan.receiver() >= 0) {
      return fail(ChannelError::InvalidGeometry, "the tcp plan of a region round names no source contacts");
    }
  } else if (plan.sender_contact() == nullptr || plan.sender_contact()->size() == 0) {
    return fail(ChannelError::InvalidGeometry, "the tcp plan names no sender contact");
  } else {
    config.senderContact = plan.sender_contact()->str();
  }
  config.agentId = setup.agentId;
  if (plan.receiver() < 0) {
    const auto* listeners = dynamic_cast<const BuildListeners*>(setup.listeners.get());
    if (listeners == nullptr || !listeners->tcp) {
      return fail(ChannelError::Unsupported, "this agent opened no tcp listener, so it cannot send on tcp");
    }
    config.listener = listeners->tcp;
  }
  auto channel = TcpChannel::open(std::move(config));
  if (!channel) return tl::unexpected(channel.error());
  (*channel)->setCancelProbe(setup.cancelProbe);
  return std::unique_ptr<Channel>(std::move(*channel));
}

}  // namespace

tl::expected<std::shared_ptr<ChannelListeners>, ChannelFailure> openChannelListeners(
    std::span<const msg::ChannelKind> kinds, std::string_view busTransport) {
  auto listeners = std::make_shared<BuildListeners>();
  if (std::find(kinds.begin(), kinds.end(), msg::ChannelKind::Tcp) != kinds.end()) {
    auto host = advertisedPayloadHost(busTransport);
    if (!host) return tl::unexpected(host.error());
    auto listener = TcpListener::open(*host);
    if (!listener) return tl::unexpected(listener.error());
    listeners->tcp = std::move(*listener);
    listeners->contacts_.push_back(ChannelContact{msg::ChannelKind::Tcp, listeners->tcp->contact()});
  }
  return listeners;
}

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openChannel(const msg::TransferPlan& plan,
                                                                   const ChannelSetup& setup) {
  if (plan.channel() == msg::ChannelKind::Tcp) return openTcp(plan, setup);
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
  auto shm = ShmChannelOwner::create(config.busName, ArenaGeometry{config.hostBucketBytes, config.bufferCount,
                                                                   static_cast<std::uint32_t>(kMaxArenaReceivers)});
  if (!shm) return tl::unexpected(shm.error());
  std::vector<std::unique_ptr<ChannelOwner>> owners;
  owners.push_back(std::move(*shm));
  owners.push_back(std::make_unique<TcpChannelOwner>());
  for (auto& owner : gpuChannelOwners(config)) owners.push_back(std::move(owner));
  return owners;
}

TensorMemory channelMemory(msg::ChannelKind kind) {
  return kind == msg::ChannelKind::Shm || kind == msg::ChannelKind::Tcp ? TensorMemory::Host : TensorMemory::Device;
}

std::string channelName(msg::ChannelKind kind) {
  switch (kind) {
    case msg::ChannelKind::Shm:
      return "shm";
    case msg::ChannelKind::Nccl:
      return "nccl";
    case msg::ChannelKind::CudaIpc:
      return "cuda_ipc";
    case msg::ChannelKind::Tcp:
      return "tcp";
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
