#include "line_pipe.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Agents write a few short lines per round; one read takes whatever has arrived.
constexpr std::size_t kReadChunk = 4096;

[[noreturn]] void failWith(const std::string& what) { throw BenchFailure(what + ": " + std::strerror(errno)); }

}  // namespace

LinePipe::LinePipe() {
  int fds[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) failWith("socketpair");
  readFd_ = writeFd_ = fds[0];
  peerFd_ = fds[1];
}

LinePipe::~LinePipe() {
  closePeer();
  if (writeFd_ >= 0 && writeFd_ != readFd_) ::close(writeFd_);
  if (readFd_ >= 0) ::close(readFd_);
}

void LinePipe::closePeer() {
  if (peerFd_ >= 0) ::close(std::exchange(peerFd_, -1));
}

std::optional<std::string> LinePipe::readLine(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (const auto newline = buffered_.find('\n'); newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    throwIfInterrupted();
    if (ended_) return std::nullopt;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd item{readFd_, POLLIN, 0};
    const int ready = ::poll(&item, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) failWith("poll on an agent's pipe");
    if (ready <= 0) continue;  // a signal (look at the interruption flag) or the deadline, both checked above
    std::array<char, kReadChunk> chunk{};
    const ssize_t got = ::read(readFd_, chunk.data(), chunk.size());
    if (got < 0 && errno != EINTR) failWith("read from an agent's pipe");
    if (got == 0) ended_ = true;  // the other side has exited (a last partial line is dropped)
    if (got > 0) buffered_.append(chunk.data(), static_cast<std::size_t>(got));
  }
}

void LinePipe::writeLine(const std::string& line) {
  const std::string text = line + "\n";
  std::size_t sent = 0;
  while (sent < text.size()) {
    // MSG_NOSIGNAL: a peer that died makes this fail with EPIPE instead of killing this process with SIGPIPE.
    const ssize_t done = ::send(writeFd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (done < 0 && errno == EINTR) {
      throwIfInterrupted();
      continue;
    }
    if (done < 0) failWith("sending '" + line + "'");
    sent += static_cast<std::size_t>(done);
  }
}

}  // namespace wsync::bench
