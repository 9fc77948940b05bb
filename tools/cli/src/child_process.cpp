#include "wsync/cli/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace wsync::cli {
namespace {

// How often a bounded wait for a child to exit looks again: short, so that callers go on soon after it ended.
constexpr std::chrono::milliseconds kReapPollInterval{5};
// The child's status when it could not set itself up before exec: the shell's "cannot run" code.
constexpr int kSetupFailed = 127;

int statusOf(int raw) { return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw); }

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("cannot start " + path + ": " + why);
}

}  // namespace

ChildProcess ChildProcess::spawn(const std::string& path, const std::vector<std::string>& args,
                                 const ChildOptions& options) {
  // Everything the child needs is prepared here: between fork and exec a process with other threads may only make
  // async-signal-safe calls (no allocation).
  std::vector<std::string> storage{path};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int stderrFd = options.stderrFd;
  int fileFd = -1;
  if (!options.stderrFile.empty()) {
    fileFd = ::open(options.stderrFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fileFd < 0) fail(path, options.stderrFile + ": " + std::strerror(errno));
    stderrFd = fileFd;
  }
  // The child writes exec's errno here; a successful exec closes it, so the parent reads end-of-file.
  int report[2] = {-1, -1};
  if (::pipe2(report, O_CLOEXEC) != 0) fail(path, std::string("pipe: ") + std::strerror(errno));
  sigset_t noSignals;
  sigemptyset(&noSignals);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid == 0) {
    if (options.ownProcessGroup) ::setpgid(0, 0);
    // Survives the exec; the check after it covers a parent that died before the request was in place.
    if (options.deathSignal != 0 && (::prctl(PR_SET_PDEATHSIG, options.deathSignal) != 0 || ::getppid() != parent)) {
      ::_exit(kSetupFailed);
    }
    ::sigprocmask(SIG_SETMASK, &noSignals, nullptr);  // a blocked signal would stay blocked after the exec
    if (options.stdinFd >= 0) ::dup2(options.stdinFd, STDIN_FILENO);
    if (options.stdoutFd >= 0) ::dup2(options.stdoutFd, STDOUT_FILENO);
    if (stderrFd >= 0) ::dup2(stderrFd, STDERR_FILENO);
    // Close-on-exec rather than closed now, so that the report pipe stays open until the exec.
    if (options.closeOtherFds) ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execve(path.c_str(), argv.data(), environ);
    const int error = errno;
    (void)!::write(report[1], &error, sizeof(error));
    ::_exit(kSetupFailed);
  }
  const int forkError = errno;
  ::close(report[1]);
  if (fileFd >= 0) ::close(fileFd);
  if (pid < 0) {
    ::close(report[0]);
    fail(path, std::string("fork: ") + std::strerror(forkError));
  }
  int execError = 0;
  ssize_t got = 0;
  do {
    got = ::read(report[0], &execError, sizeof(execError));
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof(execError))) {
    ::waitpid(pid, nullptr, 0);
    fail(path, std::strerror(execError));
  }
  return ChildProcess(pid, options.stopGrace);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), status_(other.status_), raw_(other.raw_), stopGrace_(other.stopGrace_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    stop(stopGrace_);
    pid_ = std::exchange(other.pid_, -1);
    status_ = other.status_;
    raw_ = other.raw_;
    stopGrace_ = other.stopGrace_;
  }
  return *this;
}

void ChildProcess::signal(int signalNumber) const {
  if (pid_ > 0 && !status_) ::kill(pid_, signalNumber);
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (status_ || pid_ <= 0) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int raw = 0;
    const pid_t done = ::waitpid(pid_, &raw, WNOHANG);
    if (done == pid_) {
      raw_ = raw;
      status_ = statusOf(raw);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kReapPollInterval);
  }
}

bool ChildProcess::ended() const {
  if (status_) return true;
  siginfo_t info{};
  // WNOWAIT leaves the child to be reaped (and described) by the owner.
  return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
}

std::string ChildProcess::describeExit() const {
  if (!status_) return "still running";
  if (WIFSIGNALED(raw_)) return "was killed by signal " + std::to_string(WTERMSIG(raw_));
  return "exited with status " + std::to_string(*status_);
}

void ChildProcess::stop(std::chrono::milliseconds grace) noexcept {
  if (pid_ <= 0 || status_) return;
  if (grace.count() > 0) {
    ::kill(pid_, SIGTERM);
    if (wait(grace)) return;
  }
  ::kill(pid_, SIGKILL);
  // SIGKILL cannot be caught: the kernel tears the process down, so this wait ends.
  int raw = 0;
  while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {}
  raw_ = raw;
  status_ = statusOf(raw);
}

}  // namespace wsync::cli
