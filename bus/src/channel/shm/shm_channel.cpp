#include "wsync/bus/channel/shm/shm_channel.hpp"

#include <vector>

namespace wsync::bus {

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
