#include "wsync/bus/channel/channel.hpp"

#include <vector>

#include "wsync/bus/channel/channel_owner.hpp"

#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/core/text.hpp"

namespace wsync::bus {

tl::expected<RegionTransferResult, ChannelFailure> Channel::sendRegions(
    std::uint64_t /*transfer*/, const RegionPlan& /*plan*/, std::uint32_t /*source*/,
    std::span<const std::span<const std::byte>> /*buffers*/, std::chrono::steady_clock::time_point /*deadline*/) {
  return fail(ChannelError::Unsupported,
              "channel " + std::string(msg::EnumNameChannelKind(kind())) + " does not carry sharded sources");
}

tl::expected<RegionTransferResult, ChannelFailure> Channel::receiveRegions(
    std::uint64_t /*transfer*/, const RegionPlan& /*plan*/, std::uint32_t /*receiver*/,
    std::span<const std::span<std::byte>> /*locals*/, std::chrono::steady_clock::time_point /*deadline*/) {
  return fail(ChannelError::Unsupported,
              "channel " + std::string(msg::EnumNameChannelKind(kind())) + " does not carry sliced receivers");
}

tl::expected<ChannelGrant, std::string> ChannelOwner::prepareSources(std::span<const ChannelMember> senders,
                                                                     std::span<const ChannelMember> receivers) {
  // Refused here, by the coordinator, before any engine pauses: the agents would only find out at the transfer.
  (void)receivers;
  return tl::unexpected("channel " + std::string(msg::EnumNameChannelKind(kind())) + " carries no region rounds yet (" +
                        std::to_string(senders.size()) + (senders.size() == 1 ? " source" : " sources") +
                        ", or workers that bind slices: docs/regions.md); use shm");
}

std::string channelKey(const msg::TransferPlan& plan) {
  switch (plan.channel()) {
    case msg::ChannelKind::Shm:
    case msg::ChannelKind::CudaIpc:
      return plan.arena() ? plan.arena()->str() : std::string();
    case msg::ChannelKind::Nccl: {
      // NcclChannel::key(): a new unique id is a new communicator.
      if (plan.nccl_unique_id() == nullptr) return "nccl:";
      return "nccl:" + hexBytes(std::span(plan.nccl_unique_id()->data(), plan.nccl_unique_id()->size()));
    }
    case msg::ChannelKind::Tcp: {
      // TcpChannel::key(): each round's token opens a channel of its own.
      std::span<const std::uint8_t> token;
      if (plan.nccl_unique_id() != nullptr)
        token = std::span(plan.nccl_unique_id()->data(), plan.nccl_unique_id()->size());
      if (plan.regions() && plan.source_contacts() != nullptr && plan.source_contacts()->size() > 0) {
        std::vector<std::string> contacts;
        for (const auto* contact : *plan.source_contacts()) contacts.push_back(contact->str());
        return tcpChannelKey(contacts, token);
      }
      return tcpChannelKey(plan.sender_contact() ? plan.sender_contact()->str() : std::string(), token);
    }
  }
  return std::string(msg::EnumNameChannelKind(plan.channel()));
}

}  // namespace wsync::bus
