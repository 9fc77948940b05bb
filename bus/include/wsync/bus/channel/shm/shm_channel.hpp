#pragma once
// The shm channel: the Channel over the arena in host shared memory that the coordinator created
// (docs/shm-channel.md). The coordinator's side of it is ShmChannelOwner (shm_channel_owner.hpp).
#include <functional>
#include <memory>
#include <string>

#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"

namespace wsync::bus {

class ShmChannel final : public Channel {
 public:
  static tl::expected<std::unique_ptr<ShmChannel>, ChannelFailure> open(const std::string& arenaName);

  msg::ChannelKind kind() const override { return msg::ChannelKind::Shm; }
  TensorMemory tensorMemory() const override { return TensorMemory::Host; }
  const std::string& key() const override { return arena_.name(); }
  // Asked whenever a side waits: the arena's abort word needs a live coordinator to set it.
  void setCancelProbe(std::function<bool()> probe) override { cancelProbe_ = std::move(probe); }
  tl::expected<TransferResult, ChannelFailure> send(std::uint64_t transfer, const BucketPlan& plan,
                                                    std::span<const std::span<const std::byte>> tensors,
                                                    std::uint32_t receiverCount,
                                                    std::chrono::steady_clock::time_point deadline) override;
  tl::expected<TransferResult, ChannelFailure> receive(std::uint64_t transfer, const BucketPlan& plan,
                                                       std::span<const std::span<std::byte>> tensors,
                                                       std::uint32_t receiver,
                                                       std::chrono::steady_clock::time_point deadline) override;

 private:
  explicit ShmChannel(ShmArena&& arena) : arena_(std::move(arena)) {}
  ShmArena arena_;
  std::function<bool()> cancelProbe_;
};

}  // namespace wsync::bus
