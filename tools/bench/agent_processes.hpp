#pragma once
// The agent processes of a measurement: this executable started again (/proc/self/exe) with a hidden
// subcommand, by posix_spawn. They are stopped (SIGTERM, then SIGKILL) and reaped by the destructor on every exit
// path, and each agent also dies with the benchmark (dieWithParent), so a killed run leaves none behind.
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace wsync::bench {

class AgentProcesses {
 public:
  AgentProcesses() = default;
  AgentProcesses(const AgentProcesses&) = delete;
  AgentProcesses& operator=(const AgentProcesses&) = delete;
  ~AgentProcesses() { stopAll(); }

  // Starts this executable with `args`; `label` names the agent in errors. With `stdoutFd` >= 0 the agent's stdout
  // is that descriptor (the write end of a pipe the benchmark reads), else the benchmark's; likewise `stdinFd` for
  // its stdin (the agent's end of AgentPipe::withCommands). Throws BenchFailure.
  void spawn(const std::string& label, const std::vector<std::string>& args, int stdoutFd = -1, int stdinFd = -1);

  // Throws BenchFailure naming every agent that has already exited; a measurement calls it when a wait runs out,
  // to report the cause (a dead agent) rather than the symptom (a timeout).
  void throwIfAnyExited();

  // Whether any agent has exited, without reaping it: safe to call from another thread while the owner is blocked
  // in something else (a watchdog), as long as nobody spawns or stops agents meanwhile.
  bool anyExited() const;

  // Waits up to `timeout` for every agent to exit by itself; throws unless all exited with status 0.
  void waitForAll(std::chrono::milliseconds timeout);

  // SIGTERM, up to kStopGrace to go, then SIGKILL; every agent is reaped when it returns.
  void stopAll() noexcept;

  std::size_t size() const { return agents_.size(); }

 private:
  struct Agent {
    pid_t pid = -1;
    std::string label;
    bool reaped = false;
    int status = 0;  // waitpid status, once reaped
  };

  // Reaps `agent` if it has exited (without waiting); true when it is reaped.
  static bool poll(Agent& agent);
  static std::string describeExit(const Agent& agent);

  std::vector<Agent> agents_;
};

// First thing an agent process does: ask the kernel to kill it when its parent dies, and exit at once if the
// parent already died before that request was in place.
void dieWithParent(pid_t expectedParent);

}  // namespace wsync::bench
