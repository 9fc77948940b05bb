#pragma once
// The shm channel: the Channel over the arena in host shared memory that the coordinator created
// (docs/shm-channel.md). The coordinator's side of it is ShmChannelOwner (shm_channel_owner.hpp). A round of one
// sender goes through the bus's arena; a region round of several sources through one ring a source, arenas the
// coordinator names after the bus's (sourceArenaName), which a channel opens on first use and keeps.
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

  bool carriesRegions() const override { return true; }
  tl::expected<RegionTransferResult, ChannelFailure> sendRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
      std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) override;
  // Takes the sources one after another, in source order (why that cannot deadlock: shm_channel.cpp).
  tl::expected<RegionTransferResult, ChannelFailure> receiveRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
      std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) override;

 private:
  explicit ShmChannel(ShmArena&& arena) : arena_(std::move(arena)) {}
  // Source `source`'s ring, opened on first use. The coordinator keeps the rings for its life, so a mapping stays
  // good for as long as this channel's key does (a new coordinator means a new channel).
  tl::expected<const ShmArena*, ChannelFailure> ringOf(std::uint32_t source);

  ShmArena arena_;
  std::vector<std::unique_ptr<ShmArena>> rings_;  // [source], null until opened
  std::function<bool()> cancelProbe_;
};

}  // namespace wsync::bus
