// tcp_peer: the two ends of plain TCP connections between the hosts of a host rig (tests/hosts/rig_test.cpp),
// without the bus, so that what the rig does to a connection is seen apart from what ZeroMQ does about it.
//
// Usage:
//   tcp_peer serve PORT
//       Listens on every address of its host; greets each connection with the host's name and a newline, then
//       echoes back whatever it receives. Runs until killed.
//   tcp_peer probe ADDRESS PORT TIMEOUT_MS
//       Connects and reads the greeting, both within TIMEOUT_MS, and prints the greeting.
//   tcp_peer hold ADDRESS PORT INTERVAL_MS
//       Connects, prints "greeting NAME", then sends "ping N" every INTERVAL_MS and prints "echo N" for each one that
//       comes back. It has no timeout of its own: whether a connection survives a link cut is the kernel's to say.
//       Ends when the connection does, saying how.
//
// Exit codes:
//   0  done
//   1  usage: wrong arguments
//   2  a socket could not be set up (socket, bind, listen)
//   3  timed out (probe)
//   4  the connection could not be made (refused, unreachable) or broke before the greeting
//   5  a held connection ended (reset or closed by the other end)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 1;
constexpr int kExitSetup = 2;
constexpr int kExitTimeout = 3;
constexpr int kExitNoConnection = 4;
constexpr int kExitEnded = 5;

// Connections waiting for accept: a test opens a few at a time.
constexpr int kListenBacklog = 16;

int usage() {
  std::fprintf(stderr, "usage: tcp_peer serve PORT | probe ADDRESS PORT TIMEOUT_MS | hold ADDRESS PORT INTERVAL_MS\n");
  return kExitUsage;
}

bool parseNumber(const char* text, long minimum, long maximum, long& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtol(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && value >= minimum && value <= maximum;
}

bool sendAll(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t done = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    sent += static_cast<std::size_t>(done);
  }
  return true;
}

void serveConnection(int fd) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  if (sendAll(fd, std::string(name) + "\n")) {
    char buffer[4096];
    for (;;) {
      const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0 || !sendAll(fd, std::string(buffer, static_cast<std::size_t>(got)))) break;
    }
  }
  ::close(fd);
}

int serve(long port) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int yes = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, kListenBacklog) != 0) {
    std::fprintf(stderr, "tcp_peer: cannot listen on port %ld: %s\n", port, std::strerror(errno));
    return kExitSetup;
  }
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::fprintf(stderr, "tcp_peer: accept: %s\n", std::strerror(errno));
      return kExitSetup;
    }
    std::thread(serveConnection, fd).detach();
  }
}

// Milliseconds left until `deadline`, at least 0.
int millisecondsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// A connected socket, or -1 with the exit code in `status` (and the reason printed).
int connectTo(const char* host, long port, Clock::time_point deadline, int& status) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host, &address.sin_addr) != 1) {
    std::fprintf(stderr, "tcp_peer: '%s' is not an IPv4 address\n", host);
    status = kExitUsage;
    return -1;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    std::fprintf(stderr, "tcp_peer: socket: %s\n", std::strerror(errno));
    status = kExitSetup;
    return -1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 && errno != EINPROGRESS) {
    std::fprintf(stderr, "tcp_peer: connect to %s:%ld: %s\n", host, port, std::strerror(errno));
    ::close(fd);
    status = kExitNoConnection;
    return -1;
  }
  pollfd item{fd, POLLOUT, 0};
  int ready = 0;
  do {
    ready = ::poll(&item, 1, millisecondsLeft(deadline));
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) {
    std::fprintf(stderr, "tcp_peer: connect to %s:%ld: timed out\n", host, port);
    ::close(fd);
    status = kExitTimeout;
    return -1;
  }
  int error = 0;
  socklen_t length = sizeof error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
  if (error != 0) {
    std::fprintf(stderr, "tcp_peer: connect to %s:%ld: %s\n", host, port, std::strerror(error));
    ::close(fd);
    status = kExitNoConnection;
    return -1;
  }
  // Blocking from here on: reads wait in poll first, and a send that finds the buffer full waits for the link.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Reads one line (without its newline) before `deadline`: 0, or the exit code.
int readLine(int fd, Clock::time_point deadline, std::string& line) {
  line.clear();
  for (;;) {
    pollfd item{fd, POLLIN, 0};
    const int ready = ::poll(&item, 1, millisecondsLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      std::fprintf(stderr, "tcp_peer: no greeting in time\n");
      return kExitTimeout;
    }
    char c = 0;
    const ssize_t got = ::recv(fd, &c, 1, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      std::fprintf(stderr, "tcp_peer: the connection ended before the greeting: %s\n",
                   got == 0 ? "closed" : std::strerror(errno));
      return kExitNoConnection;
    }
    if (c == '\n') return kExitOk;
    line.push_back(c);
  }
}

int probe(const char* host, long port, long timeoutMs) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  int status = kExitOk;
  const int fd = connectTo(host, port, deadline, status);
  if (fd < 0) return status;
  std::string greeting;
  status = readLine(fd, deadline, greeting);
  ::close(fd);
  if (status == kExitOk) std::printf("%s\n", greeting.c_str());
  return status;
}

int hold(const char* host, long port, long intervalMs) {
  // Connecting happens while the link is known to be up: a test that cannot connect at all fails quickly.
  constexpr std::chrono::seconds kConnectTimeout{30};
  int status = kExitOk;
  const int fd = connectTo(host, port, Clock::now() + kConnectTimeout, status);
  if (fd < 0) return status;
  std::string greeting;
  if ((status = readLine(fd, Clock::now() + kConnectTimeout, greeting)) != kExitOk) return status;
  std::printf("greeting %s\n", greeting.c_str());
  std::fflush(stdout);
  const auto interval = std::chrono::milliseconds(intervalMs);
  auto nextPing = Clock::now();
  long sent = 0;
  std::string pending;
  for (;;) {
    if (Clock::now() >= nextPing) {
      // Buffered by the kernel while the link is cut; only a broken connection makes send fail.
      if (!sendAll(fd, "ping " + std::to_string(++sent) + "\n")) {
        std::printf("ended: send: %s\n", std::strerror(errno));
        return kExitEnded;
      }
      nextPing += interval;
    }
    pollfd item{fd, POLLIN, 0};
    const int ready = ::poll(&item, 1, millisecondsLeft(nextPing));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      std::printf("ended: %s\n", got == 0 ? "closed by the other end" : std::strerror(errno));
      return kExitEnded;
    }
    pending.append(buffer, static_cast<std::size_t>(got));
    for (auto newline = pending.find('\n'); newline != std::string::npos; newline = pending.find('\n')) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (line.rfind("ping ", 0) == 0) std::printf("echo %s\n", line.substr(5).c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  long port = 0;
  long milliseconds = 0;
  if (mode == "serve" && argc == 3 && parseNumber(argv[2], 1, 65535, port)) return serve(port);
  if ((mode == "probe" || mode == "hold") && argc == 5 && parseNumber(argv[3], 1, 65535, port) &&
      parseNumber(argv[4], 1, 3'600'000, milliseconds)) {
    return mode == "probe" ? probe(argv[2], port, milliseconds) : hold(argv[2], port, milliseconds);
  }
  return usage();
}
