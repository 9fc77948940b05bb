#include "program_process.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "bench_failure.hpp"

extern char** environ;

namespace wsync::bench {
namespace {

// How often a bounded wait for a child to exit looks again.
constexpr std::chrono::milliseconds kReapPollInterval{5};
// The child's status when it could not set itself up or exec: the shell's "command not found" code.
constexpr int kExecFailed = 127;

}  // namespace

ProgramProcess ProgramProcess::start(const std::string& path, const std::vector<std::string>& args, int deathSignal,
                                     int stderrFd) {
  // Everything the child needs is prepared here: between fork and exec a multithreaded process may only make
  // async-signal-safe calls (no allocation).
  std::vector<std::string> storage{path};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  sigset_t noSignals;
  sigemptyset(&noSignals);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) throw BenchFailure("cannot start " + path + ": fork: " + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    // Survives the exec; the check after it covers a benchmark that died before the request was in place.
    if (::prctl(PR_SET_PDEATHSIG, deathSignal) != 0 || ::getppid() != parent) ::_exit(kExecFailed);
    ::sigprocmask(SIG_SETMASK, &noSignals, nullptr);  // a mask would survive the exec
    if (stderrFd >= 0 && stderrFd != STDERR_FILENO) ::dup2(stderrFd, STDERR_FILENO);
    ::close_range(3, ~0U, 0);  // the benchmark's sockets, pipes and segments are not the child's
    ::execve(path.c_str(), argv.data(), environ);
    ::_exit(kExecFailed);
  }
  return ProgramProcess(pid);
}

ProgramProcess::ProgramProcess(ProgramProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), reaped_(other.reaped_), status_(other.status_) {}

ProgramProcess& ProgramProcess::operator=(ProgramProcess&& other) noexcept {
  if (this != &other) {
    stop();
    pid_ = std::exchange(other.pid_, -1);
    reaped_ = other.reaped_;
    status_ = other.status_;
  }
  return *this;
}

bool ProgramProcess::running() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  const pid_t result = ::waitpid(pid_, &status, WNOHANG);
  if (result == pid_ || (result < 0 && errno == ECHILD)) {
    reaped_ = true;
    status_ = status;
  }
  return !reaped_;
}

std::string ProgramProcess::describeExit() const {
  if (!reaped_) return "still running";
  if (WIFEXITED(status_)) {
    return WEXITSTATUS(status_) == kExecFailed ? "could not be started (status 127)"
                                                : "exited with status " + std::to_string(WEXITSTATUS(status_));
  }
  if (WIFSIGNALED(status_)) return "was killed by signal " + std::to_string(WTERMSIG(status_));
  return "ended";
}

void ProgramProcess::requestStop() noexcept {
  if (running()) ::kill(pid_, SIGTERM);
}

void ProgramProcess::kill() noexcept {
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  status_ = status;
}

void ProgramProcess::stop(std::chrono::milliseconds grace) noexcept {
  if (!running()) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (running() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(kReapPollInterval);
  kill();
}

}  // namespace wsync::bench
