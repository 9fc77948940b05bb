#include "wsync/bus/channel/tcp/tcp_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace wsync::bus {
namespace {

constexpr std::string_view kTcpScheme = "tcp://";
// What a contact's host may hold: a DNS name or an address (no spaces, no control bytes, no schemes).
constexpr std::size_t kMaxHostBytes = 253;

bool validHost(std::string_view host) {
  if (host.empty() || host.size() > kMaxHostBytes) return false;
  for (const char c : host) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                         c == '-' || c == '_' || c == ':' || c == '%';
    if (!allowed) return false;
  }
  return true;
}

}  // namespace

tl::expected<std::string, ChannelFailure> localAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int status = ::getaddrinfo(host.c_str(), "9", &hints, &found); status != 0) {
    return fail(ChannelError::SystemError, "cannot resolve '" + host + "': " + ::gai_strerror(status));
  }
  std::string why;
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    const int fd = ::socket(entry->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    // Connecting a UDP socket picks the route and the source address without sending a packet.
    const bool routed = ::connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 &&
                        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!routed) why = std::strerror(errno);
    ::close(fd);
    if (!routed) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* address = local.ss_family == AF_INET6
                              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(local).sin6_addr)
                              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(local).sin_addr);
    if (::inet_ntop(local.ss_family, address, text, sizeof text) == nullptr) continue;
    ::freeaddrinfo(found);
    return std::string(text);
  }
  ::freeaddrinfo(found);
  return fail(ChannelError::SystemError, "no route to '" + host + "'" + (why.empty() ? std::string() : ": " + why));
}

std::string formatTcpContact(std::string_view host, std::uint16_t port) {
  const bool bracket = host.find(':') != std::string_view::npos;
  return (bracket ? "[" + std::string(host) + "]" : std::string(host)) + ":" + std::to_string(port);
}

tl::expected<TcpContact, ChannelFailure> parseTcpContact(std::string_view contact) {
  auto invalid = [&] {
    return fail(ChannelError::InvalidGeometry,
                "'" + std::string(contact.substr(0, 300)) + "' is not a tcp contact (HOST:PORT or [ADDRESS]:PORT)");
  };
  const std::size_t colon = contact.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return invalid();
  std::string_view host = contact.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return invalid();
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return invalid();  // an IPv6 address without brackets: where the port starts is a guess
  }
  if (!validHost(host)) return invalid();
  const std::string_view portText = contact.substr(colon + 1);
  unsigned port = 0;
  const auto [end, error] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (error != std::errc{} || end != portText.data() + portText.size() || port == 0 || port > 65535) return invalid();
  return TcpContact{std::string(host), static_cast<std::uint16_t>(port)};
}

tl::expected<std::string, ChannelFailure> advertisedPayloadHost(std::string_view busTransport) {
  if (const char* chosen = std::getenv(kPayloadHostVariable); chosen != nullptr && *chosen != '\0') {
    if (!validHost(chosen)) {
      return fail(ChannelError::InvalidGeometry, std::string(kPayloadHostVariable) + "='" +
                                                     std::string(chosen).substr(0, 300) +
                                                     "' is not a host name or address");
    }
    return std::string(chosen);
  }
  if (!busTransport.starts_with(kTcpScheme)) return std::string("127.0.0.1");  // ipc: the coordinator's host
  std::string_view hostPort = busTransport.substr(kTcpScheme.size());
  // ZeroMQ's tcp://SOURCE;HOST:PORT connects from SOURCE: the route that counts is still the one to HOST.
  if (const std::size_t semicolon = hostPort.find(';'); semicolon != std::string_view::npos) {
    hostPort = hostPort.substr(semicolon + 1);
  }
  const std::size_t colon = hostPort.rfind(':');
  std::string_view host = colon == std::string_view::npos ? hostPort : hostPort.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) {
    return fail(ChannelError::InvalidGeometry, "'" + std::string(busTransport) + "' names no coordinator host");
  }
  auto local = localAddressToward(std::string(host));
  if (!local) {
    return fail(local.error().code, "this host's address on its route to the coordinator: " + local.error().detail +
                                        " (set " + kPayloadHostVariable + ")");
  }
  return local;
}

}  // namespace wsync::bus
