#include "wsync/bus/channel/tcp/tcp_channel_owner.hpp"

#include <algorithm>

#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/core/random_bytes.hpp"

namespace wsync::bus {

std::uint32_t TcpChannelOwner::maxReceivers() const { return kMaxTcpReceivers; }

tl::expected<ChannelGrant, std::string> TcpChannelOwner::prepare(const ChannelMember& sender,
                                                                 std::span<const ChannelMember> receivers) {
  if (receivers.empty()) return ChannelGrant{};  // nothing moves: no sender to reach
  if (receivers.size() > kMaxTcpReceivers) {
    return tl::unexpected(std::to_string(receivers.size()) + " workers exceed the tcp channel's " +
                          std::to_string(kMaxTcpReceivers) + " receivers");
  }
  const auto contact = std::find_if(sender.contacts.begin(), sender.contacts.end(), [](const ChannelContact& offered) {
    return offered.kind == msg::ChannelKind::Tcp;
  });
  if (contact == sender.contacts.end() || contact->address.empty()) {
    return tl::unexpected("the sender '" + sender.agentId +
                          "' offered no tcp contact in its hello: it has no listener its receivers could connect to "
                          "(an agent that sends on tcp opens one at start)");
  }
  ChannelGrant grant;
  grant.groupId.resize(kTcpTokenBytes);
  // The kernel's CSPRNG: a stranger cannot predict a token from earlier ones.
  if (auto filled = fillRandom(grant.groupId); !filled) {
    return tl::unexpected("no random bytes for a tcp admission token: " + filled.error());
  }
  grant.senderContact = contact->address;
  return grant;
}

}  // namespace wsync::bus
