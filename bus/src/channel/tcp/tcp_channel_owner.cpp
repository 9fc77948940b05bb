#include "wsync/bus/channel/tcp/tcp_channel_owner.hpp"

#include <algorithm>

#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/core/random_bytes.hpp"

namespace wsync::bus {

namespace {

// The sender's tcp contact from its hello, or why it has none.
tl::expected<std::string, std::string> contactOf(const ChannelMember& sender) {
  const auto contact = std::find_if(sender.contacts.begin(), sender.contacts.end(), [](const ChannelContact& offered) {
    return offered.kind == msg::ChannelKind::Tcp;
  });
  if (contact == sender.contacts.end() || contact->address.empty()) {
    return tl::unexpected("the sender '" + sender.agentId +
                          "' offered no tcp contact in its hello: it has no listener its receivers could connect to "
                          "(an agent that sends on tcp opens one at start)");
  }
  return contact->address;
}

// A grant with a fresh admission token, or why there is none.
tl::expected<ChannelGrant, std::string> grantWithToken(std::size_t receivers) {
  if (receivers > kMaxTcpReceivers) {
    return tl::unexpected(std::to_string(receivers) + " workers exceed the tcp channel's " +
                          std::to_string(kMaxTcpReceivers) + " receivers");
  }
  ChannelGrant grant;
  grant.groupId.resize(kTcpTokenBytes);
  // The kernel's CSPRNG: a stranger cannot predict a token from earlier ones.
  if (auto filled = fillRandom(grant.groupId); !filled) {
    return tl::unexpected("no random bytes for a tcp admission token: " + filled.error());
  }
  return grant;
}

}  // namespace

std::uint32_t TcpChannelOwner::maxReceivers() const { return kMaxTcpReceivers; }

tl::expected<ChannelGrant, std::string> TcpChannelOwner::prepare(const ChannelMember& sender,
                                                                 std::span<const ChannelMember> receivers) {
  if (receivers.empty()) return ChannelGrant{};  // nothing moves: no sender to reach
  auto grant = grantWithToken(receivers.size());
  if (!grant) return grant;
  auto contact = contactOf(sender);
  if (!contact) return tl::unexpected(std::move(contact.error()));
  grant->senderContact = std::move(*contact);
  return grant;
}

tl::expected<ChannelGrant, std::string> TcpChannelOwner::prepareSources(std::span<const ChannelMember> senders,
                                                                        std::span<const ChannelMember> receivers) {
  if (senders.empty()) return tl::unexpected(std::string("a region round on tcp needs at least one source"));
  if (receivers.empty()) return ChannelGrant{};
  auto grant = grantWithToken(receivers.size());
  if (!grant) return grant;
  for (const ChannelMember& sender : senders) {
    auto contact = contactOf(sender);
    if (!contact) return tl::unexpected(std::move(contact.error()));
    grant->sourceContacts.push_back(std::move(*contact));
  }
  return grant;
}

}  // namespace wsync::bus
