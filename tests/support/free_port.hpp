#pragma once
// Test support: loopback TCP ports that were free a moment ago.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

namespace wsync::test {

// Whether `port` on 127.0.0.1 could be bound just now (0: the kernel's pick, written back into `port`).
inline bool bindable(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (ok) port = ntohs(address.sin_port);
  return ok;
}

// A port the kernel picked (-1 if none).
inline int freePort() {
  int port = 0;
  return bindable(port) ? port : -1;
}

// A port P with P + 1 free too: a tcp bus takes two (requests on P, events on P + 1).
inline int freePortPair() {
  std::mt19937 random(std::random_device{}());
  for (int attempt = 0; attempt < 100; ++attempt) {
    int first = 20'000 + static_cast<int>(random() % 30'000);
    int second = first + 1;
    if (bindable(first) && bindable(second)) return first;
  }
  return -1;
}

}  // namespace wsync::test
