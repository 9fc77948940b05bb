#include "wsync/bus/channel.hpp"

#include <vector>

namespace wsync::bus {

std::string channelKey(const msg::TransferPlan& plan) {
  switch (plan.channel()) {
    case msg::ChannelKind::Shm: return plan.arena() ? plan.arena()->str() : std::string();
    default: return std::string(msg::EnumNameChannelKind(plan.channel()));
  }
}

tl::expected<std::unique_ptr<Channel>, ChannelFailure> openChannel(const msg::TransferPlan& plan) {
  if (plan.channel() != msg::ChannelKind::Shm) {
    return fail(ChannelError::Unsupported,
                std::string("channel ") + msg::EnumNameChannelKind(plan.channel()) + " is not in this build");
  }
  if (plan.arena() == nullptr || plan.arena()->size() == 0) {
    return fail(ChannelError::NoArena, "the shm plan names no arena");
  }
  auto channel = ShmChannel::open(plan.arena()->str());
  if (!channel) return tl::unexpected(channel.error());
  return std::unique_ptr<Channel>(std::move(*channel));
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
  return arena_.send(transfer, plan, tensors, receivers, deadline);
}

tl::expected<TransferResult, ChannelFailure> ShmChannel::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t receiver,
                                                                 std::chrono::steady_clock::time_point deadline) {
  return arena_.receive(transfer, plan, tensors, receiver, deadline);
}

}  // namespace wsync::bus
