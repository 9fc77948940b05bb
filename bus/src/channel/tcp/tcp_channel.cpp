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

TcpChannel::TcpChannel(TcpChannelConfig config, std::vector<SenderAddress> addresses)
    : config_(std::move(config)),
      senderAddresses_(std::move(addresses)),
      key_(tcpChannelKey(config_.senderContact, config_.token)) {}

TcpChannel::~TcpChannel() = default;

tl::expected<std::unique_ptr<TcpChannel>, ChannelFailure> TcpChannel::open(TcpChannelConfig config) {
  if (config.token.size() != kTcpTokenBytes) {
    return fail(ChannelError::InvalidGeometry, "a tcp admission token of " + std::to_string(config.token.size()) +
                                                   " bytes, not " + std::to_string(kTcpTokenBytes));
  }
  std::vector<SenderAddress> addresses;
  if (!config.listener) {
    auto contact = parseTcpContact(config.senderContact);
    if (!contact) return tl::unexpected(contact.error());
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(contact->port);
    if (const int status = ::getaddrinfo(contact->host.c_str(), port.c_str(), &hints, &found); status != 0) {
      return fail(ChannelError::SystemError,
                  "cannot resolve the tcp sender '" + config.senderContact + "': " + ::gai_strerror(status));
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
      return fail(ChannelError::SystemError, "the tcp sender '" + config.senderContact + "' resolves to no address");
    }
  }
  return std::unique_ptr<TcpChannel>(new TcpChannel(std::move(config), std::move(addresses)));
}

}  // namespace wsync::bus
