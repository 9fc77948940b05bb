#include "wsync/bus/channel/shm/shm_channel_owner.hpp"

#include "wsync/bus/core/segment_name.hpp"

namespace wsync::bus {

tl::expected<std::unique_ptr<ShmChannelOwner>, ChannelFailure> ShmChannelOwner::create(std::string_view busName,
                                                                                       const ArenaGeometry& geometry) {
  auto arena = ShmArena::create(segmentName(busName, "shm"), geometry);
  if (!arena) return tl::unexpected(arena.error());
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

// The arena outlives rounds: an abort only wakes whoever waits on this transfer.
void ShmChannelOwner::abort(std::uint64_t round, bool /*transferBegun*/) { arena_.abortTransfer(round); }

}  // namespace wsync::bus
