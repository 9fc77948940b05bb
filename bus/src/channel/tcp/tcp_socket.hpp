#pragma once
// A socket of the tcp channel: an owned, non-blocking file descriptor, closed when its owner goes.
#include <string>
#include <utility>

namespace wsync::bus::tcp {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // Gives up ownership: the caller closes the descriptor.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }

  // Small frames (a receiver's hello, the sender's answer, the last ack) leave at once instead of waiting for
  // Nagle's algorithm to gather more, which would cost up to a delayed-ACK timeout (40 ms) per frame.
  void sendSmallFramesAtOnce() const;
  // The pending error of a non-blocking connect (SO_ERROR), 0 when none.
  int pendingError() const;
  // "ADDRESS:PORT" of the other end, for messages naming a peer; "?" when unknown.
  std::string peerName() const;

 private:
  int fd_ = -1;
};

// strerror's text for an errno value.
std::string systemText(int error);

// Whether a connection's error means that the peer is gone (it closed or reset the connection, or became
// unreachable) rather than that this side failed.
bool meansPeerGone(int error);

}  // namespace wsync::bus::tcp
