#include "captured_run.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <stdexcept>

#include <wsync/cli/child_process.hpp>

namespace wsync::test {
namespace {

using Clock = std::chrono::steady_clock;

// How often the loop looks whether the program has ended while a descendant still holds its output pipes open.
constexpr std::chrono::milliseconds kPollInterval{50};
// The shell's code for "could not run it".
constexpr int kCannotRun = 127;

struct Pipe {
  int read = -1;
  int write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    closeRead();
    closeWrite();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void closeRead() {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void closeWrite() {
    if (write >= 0) ::close(write);
    write = -1;
  }
};

// One read of what poll said is there (a second could block); false at end of file.
bool drain(Pipe& pipe, std::string& into) {
  char buffer[4096];
  ssize_t got = 0;
  do {
    got = ::read(pipe.read, buffer, sizeof buffer);
  } while (got < 0 && errno == EINTR);
  if (got > 0) into.append(buffer, static_cast<std::size_t>(got));
  return got > 0;
}

}  // namespace

std::string CapturedRun::describe() const {
  std::string what = status == kTimedOut ? "did not end in time" : "exited with status " + std::to_string(status);
  if (!err.empty()) what += ": " + err;
  return what;
}

CapturedRun runToEnd(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CapturedRun run;
  if (argv.empty()) {
    run.status = kCannotRun;
    run.err = "no program given";
    return run;
  }
  Pipe out;
  Pipe err;
  std::optional<cli::ChildProcess> child;
  try {
    child.emplace(cli::ChildProcess::spawn(argv.front(), {argv.begin() + 1, argv.end()},
                                           {.stdoutFd = out.write, .stderrFd = err.write, .deathSignal = SIGKILL}));
  } catch (const std::exception& error) {
    run.status = kCannotRun;
    run.err = error.what();
    return run;
  }
  out.closeWrite();
  err.closeWrite();
  const auto deadline = Clock::now() + timeout;
  std::array<Pipe*, 2> pipes{&out, &err};
  std::array<std::string*, 2> texts{&run.out, &run.err};
  while (Clock::now() < deadline && (out.read >= 0 || err.read >= 0)) {
    std::array<pollfd, 2> items{};
    for (std::size_t i = 0; i < 2; ++i) items[i] = {pipes[i]->read, POLLIN, 0};
    const int ready = ::poll(items.data(), items.size(), static_cast<int>(kPollInterval.count()));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      // Nothing to read: a program that has ended while something it started keeps the pipes open is done.
      if (child->ended()) break;
      continue;
    }
    for (std::size_t i = 0; i < 2; ++i) {
      if (items[i].revents != 0 && !drain(*pipes[i], *texts[i])) pipes[i]->closeRead();
    }
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (auto status = child->wait(std::max(left, std::chrono::milliseconds{0}))) run.status = *status;
  // A program still running here is stopped by the handle going away (SIGKILL), and reported as timed out.
  return run;
}

}  // namespace wsync::test
