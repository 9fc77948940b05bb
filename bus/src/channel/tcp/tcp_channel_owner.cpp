#include "wsync/bus/channel/tcp/tcp_channel_owner.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "wsync/bus/channel/tcp/tcp_channel.hpp"

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
  // getrandom: the kernel's CSPRNG, which a stranger cannot predict from earlier tokens.
  std::size_t filled = 0;
  while (filled < grant.groupId.size()) {
    const ssize_t got = ::getrandom(grant.groupId.data() + filled, grant.groupId.size() - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return tl::unexpected(std::string("no random bytes for a tcp admission token: ") + std::strerror(errno));
    }
    filled += static_cast<std::size_t>(got);
  }
  grant.senderContact = contact->address;
  return grant;
}

}  // namespace wsync::bus
