#include "wsync/bus/channel/tcp/tcp_listener.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "wsync/bus/channel/tcp/tcp_address.hpp"

namespace wsync::bus {
namespace {

// A socket bound to every interface on an ephemeral port and listening: IPv6 with IPv4-mapped addresses where the
// host has IPv6 (receivers of either family reach it), IPv4 where it does not (an IPv6-less kernel or namespace).
int listenOnEveryInterface(int& error) {
  const int fd6 = ::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd6 >= 0) {
    const int off = 0;
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    if (::setsockopt(fd6, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) == 0 &&
        ::bind(fd6, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
        ::listen(fd6, kTcpListenBacklog) == 0) {
      return fd6;
    }
    ::close(fd6);
  }
  const int fd4 = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd4 < 0) {
    error = errno;
    return -1;
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd4, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd4, kTcpListenBacklog) != 0) {
    error = errno;
    ::close(fd4);
    return -1;
  }
  return fd4;
}

}  // namespace

tl::expected<std::shared_ptr<TcpListener>, ChannelFailure> TcpListener::open(const std::string& advertisedHost) {
  int error = 0;
  const int fd = listenOnEveryInterface(error);
  if (fd < 0) {
    return fail(ChannelError::SystemError, std::string("cannot listen for tcp payloads: ") + std::strerror(error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    const int why = errno;
    ::close(fd);
    return fail(ChannelError::SystemError, std::string("the tcp payload listener's port: ") + std::strerror(why));
  }
  const std::uint16_t port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                                               : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  return std::shared_ptr<TcpListener>(new TcpListener(fd, port, formatTcpContact(advertisedHost, port)));
}

TcpListener::~TcpListener() { ::close(fd_); }

}  // namespace wsync::bus
