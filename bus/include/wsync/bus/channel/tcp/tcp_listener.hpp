#pragma once
// The tcp channel's listening socket (docs/tcp-channel.md): the sender listens, its receivers connect. An agent
// that sends on tcp opens one at start, before its hello advertises contact(), and keeps it for its life; each
// transfer accepts its receivers from it. Connections that arrive between transfers wait in the kernel's backlog
// until the next transfer accepts them (and drops those that are not its own).
//
// Threading: accepted from by the thread that sends (the agent's I/O thread); contact() from any.
#include <cstdint>
#include <memory>
#include <string>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus {

// Connections the kernel holds for a listener nobody accepts from yet: every receiver of a round (kMaxTcpReceivers)
// twice over, so that strays from an ended round cannot crowd out the next round's receivers.
inline constexpr int kTcpListenBacklog = 128;

class TcpListener {
 public:
  // Listens on every interface (IPv6 and IPv4 where the host has IPv6, else IPv4) on a port the kernel picks;
  // contact() names `advertisedHost` and that port.
  static tl::expected<std::shared_ptr<TcpListener>, ChannelFailure> open(const std::string& advertisedHost);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // "HOST:PORT" (tcp_address.hpp): what the agent's hello advertises.
  const std::string& contact() const { return contact_; }
  std::uint16_t port() const { return port_; }
  // The non-blocking listening socket.
  int fd() const { return fd_; }

 private:
  TcpListener(int fd, std::uint16_t port, std::string contact)
      : fd_(fd), port_(port), contact_(std::move(contact)) {}

  int fd_;
  std::uint16_t port_;
  std::string contact_;
};

}  // namespace wsync::bus
