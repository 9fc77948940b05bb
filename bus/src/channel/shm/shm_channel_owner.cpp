#include "wsync/bus/channel/shm/shm_channel_owner.hpp"

#include <boost/interprocess/shared_memory_object.hpp>

#include "wsync/bus/core/segment_name.hpp"

namespace wsync::bus {

tl::expected<std::unique_ptr<ShmChannelOwner>, ChannelFailure> ShmChannelOwner::create(std::string_view busName,
                                                                                       const ArenaGeometry& geometry) {
  auto arena = ShmArena::create(segmentName(busName, "shm"), geometry);
  if (!arena) return tl::unexpected(arena.error());
  // A dead coordinator's rings: created again when a round needs them, but not left in /dev/shm meanwhile.
  for (std::uint32_t source = 0; source < kMaxRegionSources; ++source) {
    boost::interprocess::shared_memory_object::remove(sourceArenaName(arena->name(), source).c_str());
  }
  return std::unique_ptr<ShmChannelOwner>(new ShmChannelOwner(std::move(*arena)));
}

tl::expected<ChannelGrant, std::string> ShmChannelOwner::prepare(const ChannelMember& /*sender*/,
                                                                 std::span<const ChannelMember> receivers) {
  if (receivers.size() > arena_.geometry().maxReceivers) {
    return tl::unexpected(std::to_string(receivers.size()) + " workers exceed the shm arena's " +
                          std::to_string(arena_.geometry().maxReceivers) + " receivers");
  }
  ChannelGrant grant;
  grant.segment = arena_.name();
  return grant;
}

tl::expected<ChannelGrant, std::string> ShmChannelOwner::prepareSources(std::span<const ChannelMember> senders,
                                                                        std::span<const ChannelMember> receivers) {
  if (senders.empty()) return tl::unexpected(std::string("a region round on shm needs at least one source"));
  if (senders.size() > kMaxRegionSources) {
    return tl::unexpected(std::to_string(senders.size()) + " sources exceed the shm channel's " +
                          std::to_string(kMaxRegionSources) + " (one ring each)");
  }
  if (receivers.size() > arena_.geometry().maxReceivers) {
    return tl::unexpected(std::to_string(receivers.size()) + " workers exceed the shm arena's " +
                          std::to_string(arena_.geometry().maxReceivers) + " receivers");
  }
  while (rings_.size() < senders.size()) {
    const auto source = static_cast<std::uint32_t>(rings_.size());
    auto ring = ShmArena::create(sourceArenaName(arena_.name(), source), arena_.geometry());
    if (!ring) {
      return tl::unexpected("cannot create the shm ring of source " + std::to_string(source) + " ('" +
                            senders[source].agentId + "'): " + ring.error().describe());
    }
    rings_.push_back(std::move(*ring));
  }
  ChannelGrant grant;
  grant.segment = arena_.name();
  return grant;
}

// The arena and the rings outlive rounds: an abort only wakes whoever waits on this transfer, in any of them.
void ShmChannelOwner::abort(std::uint64_t round, bool /*transferBegun*/) {
  arena_.abortTransfer(round);
  for (ShmArena& ring : rings_) ring.abortTransfer(round);
}

}  // namespace wsync::bus
