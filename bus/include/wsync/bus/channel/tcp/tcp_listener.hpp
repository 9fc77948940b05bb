#pragma once
// The tcp channel's listening socket (docs/tcp-channel.md, "The listener"): the sender listens, its receivers
// connect. An agent that sends on tcp opens one at start, before its hello advertises contact(), and keeps it for
// its life: bound to the agent's own address on the bus (never the wildcard) and a port fixed at opening, but
// listening only while a transfer admits its receivers. Between transfers every connection is refused, so strangers
// can neither queue in its backlog nor hold anything of the agent's while no round runs.
//
// Threading: startListening, stopListening and fd() by the thread that sends (the agent's I/O thread); contact(),
// port() and boundAddress() from any.
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus {

// Connections the kernel holds for the listener between two passes of the sender's loop (a millisecond at most),
// which accepts all it finds: room for every receiver of a round (kMaxTcpReceivers) besides a burst of strangers,
// since a receiver whose connection finds the queue full loses a second to its SYN's retransmission. The kernel
// caps it at net.core.somaxconn (4096 by default).
inline constexpr int kTcpListenBacklog = 1024;

class TcpListener {
 public:
  // Binds a socket (without listening) to `advertisedHost` when it is an address of this host, else (a NAT's outside
  // address) to this host's address on its route there, on a port the kernel picks; contact() names
  // `advertisedHost` and that port.
  static tl::expected<std::shared_ptr<TcpListener>, ChannelFailure> open(const std::string& advertisedHost);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // "HOST:PORT" (tcp_address.hpp): what the agent's hello advertises.
  const std::string& contact() const { return contact_; }
  std::uint16_t port() const { return port_; }
  // "ADDRESS:PORT" the socket is bound to (for logs: the advertised host may be a name or a NAT's address).
  const std::string& boundAddress() const { return boundAddress_; }

  // Listens on the bound port (a no-op while listening): connections are then accepted from fd().
  tl::expected<void, ChannelFailure> startListening();
  // Refuses connections again (a connect gets ECONNREFUSED) and resets those the backlog holds; the port stays bound
  // to this socket, so the contact stays valid. A no-op while not listening.
  void stopListening();
  bool listening() const { return listening_; }
  // The non-blocking socket, listening between startListening and stopListening.
  int fd() const { return fd_; }

 private:
  struct Address {
    sockaddr_storage storage;
    socklen_t length;
  };

  TcpListener(int fd, Address bound, std::uint16_t port, std::string contact, std::string boundAddress)
      : fd_(fd), bound_(bound), port_(port), contact_(std::move(contact)), boundAddress_(std::move(boundAddress)) {}

  int fd_;
  Address bound_;  // with the port
  std::uint16_t port_;
  std::string contact_;
  std::string boundAddress_;
  bool listening_ = false;
};

}  // namespace wsync::bus
