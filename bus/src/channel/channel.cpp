#include "wsync/bus/channel/channel.hpp"

#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/core/text.hpp"

namespace wsync::bus {

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
      const std::string contact = plan.sender_contact() ? plan.sender_contact()->str() : std::string();
      if (plan.nccl_unique_id() == nullptr) return tcpChannelKey(contact, {});
      return tcpChannelKey(contact, std::span(plan.nccl_unique_id()->data(), plan.nccl_unique_id()->size()));
    }
  }
  return std::string(msg::EnumNameChannelKind(plan.channel()));
}

}  // namespace wsync::bus
