#include "wsync/bus/channel/nccl/nccl_channel_owner.hpp"

#include <cstring>

#include "wsync/bus/channel/gpu/gpu_runtime.hpp"
#include "wsync/bus/state/control_block_data.hpp"

namespace wsync::bus::gpu {

// One rank per agent slot: the bus cannot have more members.
std::uint32_t NcclChannelOwner::maxReceivers() const { return static_cast<std::uint32_t>(kMaxAgents); }

tl::expected<ChannelGrant, std::string> NcclChannelOwner::prepare(const ChannelMember& sender,
                                                                  std::span<const ChannelMember> receivers) {
  return grantFor(std::span(&sender, 1), receivers);
}

tl::expected<ChannelGrant, std::string> NcclChannelOwner::prepareSources(std::span<const ChannelMember> senders,
                                                                         std::span<const ChannelMember> receivers) {
  if (senders.empty()) return tl::unexpected(std::string("a region round on nccl needs at least one source"));
  if (senders.size() + receivers.size() > kMaxAgents) {
    return tl::unexpected(std::to_string(senders.size()) + " sources and " + std::to_string(receivers.size()) +
                          " workers exceed the nccl channel's " + std::to_string(kMaxAgents) + " ranks");
  }
  return grantFor(senders, receivers);
}

tl::expected<ChannelGrant, std::string> NcclChannelOwner::grantFor(std::span<const ChannelMember> senders,
                                                                   std::span<const ChannelMember> receivers) {
  if (receivers.empty()) return ChannelGrant{};  // nothing to move to: no communicator
  std::vector<std::string> members;
  for (const ChannelMember& sender : senders) members.push_back(sender.memberKey);
  for (const ChannelMember& receiver : receivers) members.push_back(receiver.memberKey);
  if (!group_ || group_->members != members) {
    auto id = makeNcclUniqueId();
    if (!id) return tl::unexpected("no NCCL unique id: " + id.error().describe());
    std::vector<std::uint8_t> bytes(id->size());
    std::memcpy(bytes.data(), id->data(), id->size());
    group_ = Group{std::move(members), std::move(bytes)};
  }
  ChannelGrant grant;
  grant.groupId = group_->uniqueId;
  grant.ranked = true;
  return grant;
}

void NcclChannelOwner::abort(std::uint64_t /*round*/, bool transferBegun) {
  // The agents' cancel probes see the round end in the control block; only the communicator is in doubt.
  if (transferBegun) group_.reset();
}

}  // namespace wsync::bus::gpu
