#include "wsync/bus/channel.hpp"

#include <vector>

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

tl::expected<std::unique_ptr<ShmChannel>, ChannelFailure> ShmChannel::open(const std::string& arenaName) {
  auto arena = ShmArena::open(arenaName);
  if (!arena) return tl::unexpected(arena.error());
  return std::unique_ptr<ShmChannel>(new ShmChannel(std::move(*arena)));
}

tl::expected<TransferResult, ChannelFailure> ShmChannel::send(std::uint64_t transfer, const BucketPlan& plan,
                                                              std::span<const std::span<const std::byte>> tensors,
                                                              std::uint32_t receiverCount,
                                                              std::chrono::steady_clock::time_point deadline) {
  std::vector<std::uint32_t> receivers(receiverCount);
  for (std::uint32_t index = 0; index < receiverCount; ++index) receivers[index] = index;
  return arena_.send(transfer, plan, tensors, receivers, deadline, progress(), cancelProbe_);
}

tl::expected<TransferResult, ChannelFailure> ShmChannel::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t receiver,
                                                                 std::chrono::steady_clock::time_point deadline) {
  return arena_.receive(transfer, plan, tensors, receiver, deadline, progress(), cancelProbe_);
}

}  // namespace wsync::bus
