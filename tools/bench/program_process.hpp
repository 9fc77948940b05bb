#pragma once
// A real wsync program (wsync-coordinator, wsync-worker) run as a child of the benchmark. Unlike AgentProcesses
// (this executable started again), these are the installed programs, so the benchmark cannot make them call
// dieWithParent: it is done between fork and exec instead, and survives the exec. Each child also gets a process
// group of its own, so that Ctrl-C at the terminal reaches the benchmark alone, which then stops its children in
// order (trainer, workers, coordinator) instead of racing them. Stopped (SIGTERM, then SIGKILL) and reaped by the
// destructor on every exit path.
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace wsync::bench {

class ProgramProcess {
 public:
  // Starts `path` with `args` (argv[1..]). `deathSignal` reaches the child when the benchmark's calling thread
  // ends (call it from the main thread): SIGTERM lets a coordinator remove its segments and sockets. With
  // `stderrFd` >= 0 the child's stderr is that descriptor. Every other descriptor of the benchmark is closed in the
  // child, so its open-fd count is its own. Throws BenchFailure.
  static ProgramProcess start(const std::string& path, const std::vector<std::string>& args, int deathSignal,
                              int stderrFd);

  ProgramProcess() = default;
  ProgramProcess(ProgramProcess&& other) noexcept;
  ProgramProcess& operator=(ProgramProcess&& other) noexcept;
  ProgramProcess(const ProgramProcess&) = delete;
  ProgramProcess& operator=(const ProgramProcess&) = delete;
  ~ProgramProcess() { stop(); }

  pid_t pid() const { return pid_; }
  // Reaps the child if it has exited (without waiting); true while it runs.
  bool running();
  // "exited with status 2", "killed by signal 9"; meaningful once running() returned false.
  std::string describeExit() const;

  // SIGTERM without waiting, so that several children can stop at the same time (then stop() each).
  void requestStop() noexcept;
  // SIGKILL and reap: the kernel tears the process down, so the wait is bounded. Nothing if already reaped.
  void kill() noexcept;
  // SIGTERM, up to `grace` to exit, then SIGKILL; reaped when it returns.
  void stop(std::chrono::milliseconds grace = kDefaultGrace) noexcept;

 private:
  static constexpr std::chrono::milliseconds kDefaultGrace{5'000};
  explicit ProgramProcess(pid_t pid) : pid_(pid) {}

  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;  // waitpid status, once reaped
};

}  // namespace wsync::bench
