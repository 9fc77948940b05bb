#pragma once
// A program run as a child of a tool or a test: fork and exec, with what a benchmark or a test harness needs set up
// in between (its standard streams, a death signal, a process group of its own, no inherited descriptors). The
// handle stops and reaps the child when it goes away, so a failing run never leaves processes behind.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace wsync::cli {

struct ChildOptions {
  // Descriptors that become the child's stdin, stdout and stderr (-1: the parent's).
  int stdinFd = -1;
  int stdoutFd = -1;
  int stderrFd = -1;
  // The child's stderr goes to this file, created or truncated (instead of stderrFd).
  std::string stderrFile{};
  // Sent to the child when the parent's thread that started it ends (PR_SET_PDEATHSIG): SIGKILL for helpers that
  // must not outlive a killed parent, SIGTERM for one that must still clean up. 0: none.
  int deathSignal = 0;
  // A process group of its own: Ctrl-C at the terminal then reaches the parent alone, which stops its children in
  // the order it chooses.
  bool ownProcessGroup = false;
  // Closes every descriptor but 0-2 in the child, so that its open-descriptor count is its own.
  bool closeOtherFds = false;
  // What the destructor allows after SIGTERM before SIGKILL; zero: SIGKILL at once.
  std::chrono::milliseconds stopGrace{0};
};

class ChildProcess {
 public:
  // Starts `path` with `args` (argv[1..]). Throws std::runtime_error when it cannot be started (exec's error too).
  static ChildProcess spawn(const std::string& path, const std::vector<std::string>& args,
                            const ChildOptions& options = {});

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { stop(stopGrace_); }

  pid_t pid() const { return pid_; }
  void signal(int signalNumber) const;

  // Its exit status (128 + the signal when killed) once it has ended; nothing if it still runs after `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  bool running() { return !wait(std::chrono::milliseconds{0}).has_value(); }
  // Whether it has ended, without reaping it: safe from another thread while the owner waits elsewhere (a
  // watchdog), as long as the owner does not reap or replace it meanwhile.
  bool ended() const;
  // "exited with status 2", "was killed by signal 9", "still running".
  std::string describeExit() const;

  // SIGTERM, up to `grace` to exit, then SIGKILL (at once when `grace` is zero); reaped when it returns.
  void stop(std::chrono::milliseconds grace) noexcept;

 private:
  ChildProcess(pid_t pid, std::chrono::milliseconds stopGrace) : pid_(pid), stopGrace_(stopGrace) {}

  pid_t pid_ = -1;
  std::optional<int> status_;  // once reaped
  int raw_ = 0;                // waitpid's status, once reaped
  std::chrono::milliseconds stopGrace_{0};
};

}  // namespace wsync::cli
