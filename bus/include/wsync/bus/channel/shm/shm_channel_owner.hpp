#pragma once
// The coordinator's side of the shm channel: the bus's arena, created with the coordinator and kept for its life.
#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"

namespace wsync::bus {

class ShmChannelOwner final : public ChannelOwner {
 public:
  // Creates the arena "wsync-<euid>-<bus>-shm" (replacing one left by a dead coordinator).
  static tl::expected<std::unique_ptr<ShmChannelOwner>, ChannelFailure> create(std::string_view busName,
                                                                               const ArenaGeometry& geometry);

  msg::ChannelKind kind() const override { return msg::ChannelKind::Shm; }
  TensorMemory tensorMemory() const override { return TensorMemory::Host; }
  std::uint32_t maxReceivers() const override { return arena_.geometry().maxReceivers; }
  bool crossesHosts() const override { return false; }  // the arena is a segment on the coordinator's host
  tl::expected<ChannelGrant, std::string> prepare(const ChannelMember& sender,
                                                  std::span<const ChannelMember> receivers) override;
  void abort(std::uint64_t round, bool transferBegun) override;

 private:
  explicit ShmChannelOwner(ShmArena&& arena) : arena_(std::move(arena)) {}
  ShmArena arena_;
};

}  // namespace wsync::bus
