#pragma once
// A child process of the demo: started with posix_spawn, its stdout and stderr appended to a log file, killed and
// reaped when the handle goes away so that a failed demo leaves nothing running.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <tl/expected.hpp>

namespace wsync::demo {

class Process {
 public:
  static tl::expected<Process, std::string> spawn(const std::string& path, const std::vector<std::string>& args,
                                                  const std::string& logPath);
  Process(Process&& other) noexcept;
  Process& operator=(Process&&) = delete;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  pid_t pid() const { return pid_; }
  void signal(int signalNumber) const;
  // Exit status (128 + signal when killed) once it ends; nothing if it still runs after `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // Non-blocking: the status if it has ended.
  std::optional<int> poll() { return wait(std::chrono::milliseconds(0)); }

 private:
  explicit Process(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> status_;
};

}  // namespace wsync::demo
