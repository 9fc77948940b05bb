#pragma once
// Test support: a real child process (posix_spawn), killed and reaped when the handle goes away so that a failing
// test never leaves processes behind.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace wsync::test {

class ChildProcess {
 public:
  // Starts `path` with `args` (argv[1..]); throws std::runtime_error when it cannot start. With `stderrPath` the
  // child's stderr goes to that file (created or truncated) instead of the test's.
  static ChildProcess spawn(const std::string& path, const std::vector<std::string>& args,
                            const std::string& stderrPath = {});

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  void signal(int signalNumber) const;
  // Exit status (or 128 + signal) once it ends; nothing if it is still running after `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> status_;
};

}  // namespace wsync::test
