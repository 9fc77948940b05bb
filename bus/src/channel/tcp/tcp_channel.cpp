#include "wsync/bus/channel/tcp/tcp_channel.hpp"

#include <netdb.h>

#include <cstring>

#include "channel/tcp/tcp_socket.hpp"
#include "wsync/bus/channel/tcp/tcp_address.hpp"
#include "wsync/bus/core/text.hpp"

namespace wsync::bus {

std::string tcpChannelKey(std::string_view senderContact, std::span<const std::uint8_t> token) {
  return "tcp:" + std::string(senderContact) + "/" + hexBytes(token);
}

std::string tcpChannelKey(std::span<const std::string> sourceContacts, std::span<const std::uint8_t> token) {
  std::string contacts;
  for (const std::string& contact : sourceContacts) contacts += (contacts.empty() ? "" : ",") + contact;
  return "tcp-sources:" + contacts + "/" + hexBytes(token);
}

TcpChannel::TcpChannel(TcpChannelConfig config, std::vector<SenderTarget> senders)
    : config_(std::move(config)),
      senders_(std::move(senders)),
      key_(config_.sourceContacts.empty() ? tcpChannelKey(config_.senderContact, config_.token)
                                          : tcpChannelKey(config_.sourceContacts, config_.token)) {}

TcpChannel::~TcpChannel() = default;

tl::expected<std::unique_ptr<TcpChannel>, ChannelFailure> TcpChannel::open(TcpChannelConfig config) {
  if (config.token.size() != kTcpTokenBytes) {
    return fail(ChannelError::InvalidGeometry, "a tcp admission token of " + std::to_string(config.token.size()) +
                                                   " bytes, not " + std::to_string(kTcpTokenBytes));
  }
  // A receiver reaches the sender, or in a region round every source; a sender reaches nobody.
  std::vector<SenderTarget> senders;
  if (!config.listener) {
    if (config.sourceContacts.empty()) {
      senders.push_back(SenderTarget{config.senderContact, "the tcp sender", {}});
    } else {
      for (std::size_t source = 0; source < config.sourceContacts.size(); ++source) {
        senders.push_back(SenderTarget{config.sourceContacts[source], "tcp source " + std::to_string(source), {}});
      }
    }
  }
  for (SenderTarget& sender : senders) {
    auto resolved = resolveSender(sender.contact);
    if (!resolved) return tl::unexpected(resolved.error());
    sender.addresses = std::move(*resolved);
  }
  return std::unique_ptr<TcpChannel>(new TcpChannel(std::move(config), std::move(senders)));
}

tl::expected<std::vector<TcpChannel::SenderAddress>, ChannelFailure> TcpChannel::resolveSender(
    const std::string& senderContact) {
  std::vector<SenderAddress> addresses;
  auto contact = parseTcpContact(senderContact);
  if (!contact) return tl::unexpected(contact.error());
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(contact->port);
  if (const int status = ::getaddrinfo(contact->host.c_str(), port.c_str(), &hints, &found); status != 0) {
    return fail(ChannelError::SystemError,
                "cannot resolve the tcp sender '" + senderContact + "': " + ::gai_strerror(status));
  }
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SenderAddress address{};
    std::memcpy(&address.address, entry->ai_addr, entry->ai_addrlen);
    address.length = entry->ai_addrlen;
    addresses.push_back(address);
  }
  ::freeaddrinfo(found);
  if (addresses.empty()) {
    return fail(ChannelError::SystemError, "the tcp sender '" + senderContact + "' resolves to no address");
  }
  return addresses;
}

}  // namespace wsync::bus
