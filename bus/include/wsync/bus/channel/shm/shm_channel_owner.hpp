#pragma once
// The coordinator's side of the shm channel: the bus's arena, created with the coordinator and kept for its life, and
// for region rounds one ring a source (sourceArenaName), each created the first time a round has that many sources
// and kept for the coordinator's life too, so that the agents' mappings of them stay good.
#include <memory>
#include <vector>

#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"

namespace wsync::bus {

class ShmChannelOwner final : public ChannelOwner {
 public:
  // Creates the arena "wsync-<euid>-<bus>-shm" (replacing one left by a dead coordinator, and removing the rings it
  // left).
  static tl::expected<std::unique_ptr<ShmChannelOwner>, ChannelFailure> create(std::string_view busName,
                                                                               const ArenaGeometry& geometry);

  msg::ChannelKind kind() const override { return msg::ChannelKind::Shm; }
  TensorMemory tensorMemory() const override { return TensorMemory::Host; }
  std::uint32_t maxReceivers() const override { return arena_.geometry().maxReceivers; }
  bool crossesHosts() const override { return false; }  // the arena is a segment on the coordinator's host
  tl::expected<ChannelGrant, std::string> prepare(const ChannelMember& sender,
                                                  std::span<const ChannelMember> receivers) override;
  // Makes sure every source has its ring (of the arena's geometry); the grant names the bus's arena, from which the
  // agents derive each ring's name.
  tl::expected<ChannelGrant, std::string> prepareSources(std::span<const ChannelMember> senders,
                                                         std::span<const ChannelMember> receivers) override;
  void abort(std::uint64_t round, bool transferBegun) override;

  // Rings created so far (the most sources a round has had).
  std::uint32_t ringCount() const { return static_cast<std::uint32_t>(rings_.size()); }

 private:
  explicit ShmChannelOwner(ShmArena&& arena) : arena_(std::move(arena)) {}
  ShmArena arena_;
  std::vector<ShmArena> rings_;  // [source]
};

}  // namespace wsync::bus
