#include "wsync/bus/channel/tcp/tcp_listener.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "channel/tcp/tcp_socket.hpp"
#include "wsync/bus/channel/tcp/tcp_address.hpp"
#include "wsync/bus/core/log.hpp"

namespace wsync::bus {
namespace {

// Ports tried when another socket takes the one just picked before this one binds it (see bindByNumber): that
// needs a bind to land on the same port within microseconds, so a second try is already a rarity.
constexpr int kPortAttempts = 8;

struct Candidate {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

void setPort(Candidate& address, std::uint16_t port) {
  if (address.storage.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6&>(address.storage).sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in&>(address.storage).sin_port = htons(port);
  }
}

std::uint16_t portOf(const sockaddr_storage& address) {
  return ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(address).sin6_port
                                             : reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

// Every address `host` resolves to (a name may have several), for a stream socket; empty when it resolves to none.
std::vector<Candidate> resolve(const std::string& host, std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); status != 0) {
    why = std::string("cannot resolve '") + host + "': " + ::gai_strerror(status);
    return {};
  }
  std::vector<Candidate> candidates;
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_addrlen > sizeof(sockaddr_storage)) continue;
    if (entry->ai_family != AF_INET && entry->ai_family != AF_INET6) continue;
    Candidate candidate;
    std::memcpy(&candidate.storage, entry->ai_addr, entry->ai_addrlen);
    candidate.length = entry->ai_addrlen;
    candidates.push_back(candidate);
  }
  ::freeaddrinfo(found);
  if (candidates.empty()) why = "'" + host + "' resolves to no IPv4 or IPv6 address";
  return candidates;
}

// A socket bound to `address` on a port the kernel picks, bound to it by number. The kernel keeps a port across a
// listening socket's shutdown (stopListening) only when the socket asked for it by number: an ephemeral one goes
// back to the pool, and the next listen would take another than the contact names. So a throwaway socket learns a
// free port and this one binds it. -1 and errno's value in `error` when it cannot (EADDRNOTAVAIL: not this host's).
int bindByNumber(Candidate& address, int& error) {
  for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
    tcp::Socket probe(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    setPort(address, 0);
    if (!probe.valid() ||
        ::bind(probe.fd(), reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0) {
      error = errno;
      return -1;
    }
    sockaddr_storage picked{};
    socklen_t length = sizeof picked;
    if (::getsockname(probe.fd(), reinterpret_cast<sockaddr*>(&picked), &length) != 0) {
      error = errno;
      return -1;
    }
    probe.close();  // only bound, never connected: the port is free again at once
    setPort(address, portOf(picked));
    tcp::Socket bound(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    // Without it the socket cannot listen again while connections of an earlier transfer are still on its port (in
    // TIME_WAIT, or kept open after a failure): listen fails with EADDRINUSE. The kernel lets only sockets of this
    // user share the port through it; SO_REUSEADDR would serve as well, but lets any user bind the port while it is
    // not listening, and then listen there first.
    const int on = 1;
    if (!bound.valid() || ::setsockopt(bound.fd(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
      error = errno;
      return -1;
    }
    if (::bind(bound.fd(), reinterpret_cast<const sockaddr*>(&address.storage), address.length) == 0) {
      const int fd = bound.fd();
      (void)bound.release();
      return fd;
    }
    error = errno;
    if (error != EADDRINUSE) return -1;  // else another socket took the port meanwhile: pick again
  }
  return -1;
}

std::string describe(const Candidate& address) {
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address.storage), address.length, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return "?";
  }
  return formatTcpContact(host, portOf(address.storage));
}

}  // namespace

tl::expected<std::shared_ptr<TcpListener>, ChannelFailure> TcpListener::open(const std::string& advertisedHost) {
  std::string why;
  std::vector<Candidate> candidates = resolve(advertisedHost, why);
  if (candidates.empty()) {
    return fail(ChannelError::SystemError, "cannot bind the tcp payload listener: " + why);
  }
  int error = 0;
  int fd = -1;
  Candidate* bound = nullptr;
  bool local = false;
  for (Candidate& candidate : candidates) {
    fd = bindByNumber(candidate, error);
    if (fd >= 0 || error != EADDRNOTAVAIL) local = true;
    if (fd >= 0) {
      bound = &candidate;
      break;
    }
  }
  std::vector<Candidate> routed;
  if (fd < 0 && !local) {
    // Not an address of this host (a NAT's outside address, WSYNC_PAYLOAD_HOST): bind the address of this host
    // that its traffic there leaves from, which is the one a NAT forwards to.
    auto source = localAddressToward(advertisedHost);
    if (!source) {
      return fail(ChannelError::SystemError, "cannot bind the tcp payload listener: '" + advertisedHost +
                                                 "' is not an address of this host, and " + source.error().detail);
    }
    routed = resolve(*source, why);
    if (routed.empty()) return fail(ChannelError::SystemError, "cannot bind the tcp payload listener: " + why);
    fd = bindByNumber(routed.front(), error);
    bound = &routed.front();
  }
  if (fd < 0) {
    return fail(ChannelError::SystemError,
                "cannot bind the tcp payload listener to '" + advertisedHost + "': " + tcp::systemText(error));
  }
  Address address{bound->storage, bound->length};
  const std::uint16_t port = portOf(address.storage);
  const std::string boundAddress = describe(*bound);
  // Where strangers could reach it, for the operator (and tests that knock on it): listening only during sends.
  log::info("tcp payload listener bound to {}, advertised as {}", boundAddress, formatTcpContact(advertisedHost, port));
  return std::shared_ptr<TcpListener>(
      new TcpListener(fd, address, port, formatTcpContact(advertisedHost, port), boundAddress));
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

tl::expected<void, ChannelFailure> TcpListener::startListening() {
  if (listening_) return {};
  if (fd_ < 0) return fail(ChannelError::SystemError, "the tcp payload listener lost its port " + boundAddress_);
  if (::listen(fd_, kTcpListenBacklog) != 0) {
    return fail(ChannelError::SystemError, "listening at " + boundAddress_ + ": " + tcp::systemText(errno));
  }
  listening_ = true;
  return {};
}

void TcpListener::stopListening() {
  if (!listening_) return;
  listening_ = false;
  // Linux: shutting a listening socket down for reading stops it listening and resets what its backlog holds; the
  // socket keeps the port it was bound to by number, and can listen again.
  if (::shutdown(fd_, SHUT_RD) == 0) return;
  // Not seen on Linux, but then a fresh socket bound by number refuses connections just as well.
  const int why = errno;
  ::close(fd_);
  fd_ = ::socket(bound_.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<const sockaddr*>(&bound_.storage), bound_.length) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
  log::warn("the tcp payload listener at {} could not stop listening ({}): {}", boundAddress_, tcp::systemText(why),
            fd_ >= 0 ? "bound again" : "its port is lost, and the next transfer on tcp fails");
}

}  // namespace wsync::bus
