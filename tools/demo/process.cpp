#include "process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

extern char** environ;

namespace wsync::demo {

namespace {

// A process that ignores SIGTERM this long is killed.
constexpr std::chrono::milliseconds kTerminateGrace{5'000};
constexpr std::chrono::milliseconds kReapPollInterval{5};

int statusOf(int raw) { return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw); }

}  // namespace

tl::expected<Process, std::string> Process::spawn(const std::string& path, const std::vector<std::string>& args,
                                                  const std::string& logPath) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return tl::unexpected("cannot start " + path + ": " + std::strerror(error));
  return Process(pid);
}

Process::Process(Process&& other) noexcept : pid_(other.pid_), status_(other.status_) { other.pid_ = 0; }

Process::~Process() {
  if (pid_ <= 0 || status_) return;
  ::kill(pid_, SIGTERM);
  if (!wait(kTerminateGrace)) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::hours(1));
  }
}

void Process::signal(int signalNumber) const {
  if (pid_ > 0 && !status_) ::kill(pid_, signalNumber);
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  if (status_ || pid_ <= 0) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int raw = 0;
    const pid_t reaped = ::waitpid(pid_, &raw, WNOHANG);
    if (reaped == pid_) {
      status_ = statusOf(raw);
      return status_;
    }
    if (reaped < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kReapPollInterval);
  }
}

}  // namespace wsync::demo
