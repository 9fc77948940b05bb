#pragma once
// The coordinator's side of the nccl channel: a unique id per communicator, so that users never pick an address or a
// port for one. The communicator is made for one list of members (the sender, or a region round's sources in source
// order, then the receivers in order) and kept
// while rounds commit; a new member list, or an abort once the transfer had begun (a communicator may then be
// aborted on some ranks and not on others), gets a new unique id and the agents build a new communicator.
// Nothing here needs a GPU: a unique id is NCCL's bootstrap address (NCCL is loaded at run time, and its bootstrap
// root then runs in this process until every rank has joined).
#include <optional>
#include <string>
#include <vector>

#include "wsync/bus/channel/channel_owner.hpp"

namespace wsync::bus::gpu {

class NcclChannelOwner final : public ChannelOwner {
 public:
  msg::ChannelKind kind() const override { return msg::ChannelKind::Nccl; }
  TensorMemory tensorMemory() const override { return TensorMemory::Device; }
  std::uint32_t maxReceivers() const override;
  bool crossesHosts() const override { return true; }  // NCCL's bootstrap and network transport cross hosts
  tl::expected<ChannelGrant, std::string> prepare(const ChannelMember& sender,
                                                  std::span<const ChannelMember> receivers) override;
  tl::expected<ChannelGrant, std::string> prepareSources(std::span<const ChannelMember> senders,
                                                         std::span<const ChannelMember> receivers) override;
  void abort(std::uint64_t round, bool transferBegun) override;

 private:
  // The grant of a communicator of `senders` (ranks 0..M-1) and `receivers` (M..M+N-1): the group's id, made anew
  // when the members changed.
  tl::expected<ChannelGrant, std::string> grantFor(std::span<const ChannelMember> senders,
                                                   std::span<const ChannelMember> receivers);

  struct Group {
    std::vector<std::string> members;  // member keys; index = NCCL rank
    std::vector<std::uint8_t> uniqueId;
  };
  std::optional<Group> group_;
};

}  // namespace wsync::bus::gpu
