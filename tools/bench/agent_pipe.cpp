#include "agent_pipe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "bench_failure.hpp"
#include "interruption.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Agents write a few short lines per transfer; one read takes whatever has arrived.
constexpr std::size_t kReadChunk = 4096;

}  // namespace

AgentPipe::AgentPipe() {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) throw BenchFailure(std::string("pipe: ") + std::strerror(errno));
  readFd_ = fds[0];
  writeFd_ = fds[1];
}

AgentPipe::AgentPipe(CommandsTag) : commands_(true) {
  int fds[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw BenchFailure(std::string("socketpair: ") + std::strerror(errno));
  }
  readFd_ = fds[0];
  writeFd_ = fds[1];
}

AgentPipe AgentPipe::withCommands() { return AgentPipe(CommandsTag{}); }

AgentPipe::AgentPipe(AgentPipe&& other) noexcept
    : readFd_(std::exchange(other.readFd_, -1)),
      writeFd_(std::exchange(other.writeFd_, -1)),
      commands_(other.commands_),
      ended_(other.ended_),
      buffered_(std::move(other.buffered_)) {}

AgentPipe::~AgentPipe() {
  closeWriteEnd();
  if (readFd_ >= 0) ::close(readFd_);
}

void AgentPipe::closeWriteEnd() {
  if (writeFd_ >= 0) ::close(std::exchange(writeFd_, -1));
}

std::optional<std::string> AgentPipe::readLine(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (const auto newline = buffered_.find('\n'); newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    throwIfInterrupted();
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd item{readFd_, POLLIN, 0};
    const int ready = ::poll(&item, 1, static_cast<int>(left.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;  // a signal: look at the interruption flag, then wait for the rest
      throw BenchFailure(std::string("poll on an agent's pipe: ") + std::strerror(errno));
    }
    if (ready == 0) continue;  // the deadline is checked above
    std::array<char, kReadChunk> chunk{};
    const ssize_t got = ::read(readFd_, chunk.data(), chunk.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw BenchFailure(std::string("read from an agent's pipe: ") + std::strerror(errno));
    }
    if (got == 0) {  // the agent has exited (its last partial line, if any, is dropped)
      ended_ = true;
      return std::nullopt;
    }
    buffered_.append(chunk.data(), static_cast<std::size_t>(got));
  }
}

void AgentPipe::writeLine(const std::string& line) {
  if (!commands_) throw BenchFailure("writeLine on an agent pipe made without commands");
  const std::string text = line + "\n";
  std::size_t sent = 0;
  while (sent < text.size()) {
    // MSG_NOSIGNAL: an agent that died makes this fail with EPIPE instead of killing the benchmark with SIGPIPE.
    const ssize_t done = ::send(readFd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (done < 0) {
      if (errno == EINTR) {
        throwIfInterrupted();
        continue;
      }
      throw BenchFailure(std::string("sending '") + line + "' to an agent: " + std::strerror(errno));
    }
    sent += static_cast<std::size_t>(done);
  }
}

}  // namespace wsync::bench
