#pragma once
// The coordinator's side of the tcp channel (docs/tcp-channel.md): nothing to create or keep, but for each round a
// fresh random admission token, and the sender's contact (in a region round every source's) from its hello for the
// receivers' plans.
#include "wsync/bus/channel/channel_owner.hpp"

namespace wsync::bus {

class TcpChannelOwner final : public ChannelOwner {
 public:
  msg::ChannelKind kind() const override { return msg::ChannelKind::Tcp; }
  TensorMemory tensorMemory() const override { return TensorMemory::Host; }
  std::uint32_t maxReceivers() const override;
  bool crossesHosts() const override { return true; }  // receivers connect to the sender's address, wherever it is
  // Refuses a round whose sender advertised no tcp contact (it did not open the listener a sender needs).
  tl::expected<ChannelGrant, std::string> prepare(const ChannelMember& sender,
                                                  std::span<const ChannelMember> receivers) override;
  // The same for a region round, naming the first source without a contact.
  tl::expected<ChannelGrant, std::string> prepareSources(std::span<const ChannelMember> senders,
                                                         std::span<const ChannelMember> receivers) override;
  // Nothing to wake: the agents' cancel probes see the round end, and the token dies with it (the sender refuses
  // any connection presenting it in a later round).
  void abort(std::uint64_t /*round*/, bool /*transferBegun*/) override {}
};

}  // namespace wsync::bus
