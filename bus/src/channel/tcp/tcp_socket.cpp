#include "channel/tcp/tcp_socket.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "wsync/bus/channel/tcp/tcp_address.hpp"

namespace wsync::bus::tcp {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::sendSmallFramesAtOnce() const {
  const int on = 1;
  (void)::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // an optimisation: a failure costs latency only
}

int Socket::pendingError() const {
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
  return error;
}

std::string Socket::peerName() const {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET6) {
    const auto& address = reinterpret_cast<const sockaddr_in6&>(peer);
    if (::inet_ntop(AF_INET6, &address.sin6_addr, text, sizeof text) == nullptr) return "?";
    std::string host(text);
    // A v4 peer of a dual-stack listener: named as v4.
    if (host.starts_with("::ffff:") && host.find('.') != std::string::npos) {
      return formatTcpContact(host.substr(7), ntohs(address.sin6_port));
    }
    return formatTcpContact(host, ntohs(address.sin6_port));
  }
  const auto& address = reinterpret_cast<const sockaddr_in&>(peer);
  if (::inet_ntop(AF_INET, &address.sin_addr, text, sizeof text) == nullptr) return "?";
  return formatTcpContact(text, ntohs(address.sin_port));
}

std::string systemText(int error) { return std::strerror(error); }

bool meansPeerGone(int error) {
  return error == ECONNRESET || error == EPIPE || error == ETIMEDOUT || error == EHOSTUNREACH || error == ENETUNREACH ||
         error == ECONNABORTED || error == ENOTCONN;
}

}  // namespace wsync::bus::tcp
