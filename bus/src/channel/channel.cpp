#include "wsync/bus/channel/channel.hpp"

namespace wsync::bus {

std::string channelKey(const msg::TransferPlan& plan) {
  switch (plan.channel()) {
    case msg::ChannelKind::Shm:
    case msg::ChannelKind::CudaIpc: return plan.arena() ? plan.arena()->str() : std::string();
    case msg::ChannelKind::Nccl: {
      // NcclChannel::key(): a new unique id is a new communicator.
      static constexpr char kDigits[] = "0123456789abcdef";
      std::string key = "nccl:";
      if (plan.nccl_unique_id() != nullptr) {
        for (const std::uint8_t value : *plan.nccl_unique_id()) {
          key.push_back(kDigits[value >> 4]);
          key.push_back(kDigits[value & 15U]);
        }
      }
      return key;
    }
  }
  return std::string(msg::EnumNameChannelKind(plan.channel()));
}

}  // namespace wsync::bus
