#pragma once
// A pipe whose write end becomes an agent's stdout (AgentProcesses::spawn): the agent reports one line per event,
// the benchmark reads them with a bound on every wait. Both ends are close-on-exec, so no other agent inherits them
// and the read end sees end-of-file once this agent is gone.
//
// withCommands() makes a socket pair instead: the agent's end becomes its stdin and its stdout, so the benchmark
// also sends it commands (writeLine), one line each, and an agent that has died makes writeLine fail, not SIGPIPE.
#include <chrono>
#include <optional>
#include <string>

namespace wsync::bench {

class AgentPipe {
 public:
  AgentPipe();  // throws BenchFailure
  static AgentPipe withCommands();  // throws BenchFailure
  AgentPipe(AgentPipe&& other) noexcept;
  AgentPipe& operator=(AgentPipe&&) = delete;
  AgentPipe(const AgentPipe&) = delete;
  AgentPipe& operator=(const AgentPipe&) = delete;
  ~AgentPipe();

  // The agent's end: its stdout (and, withCommands, its stdin).
  int writeEnd() const { return writeFd_; }
  // Called once the agent holds its copy: from then on end-of-file means the agent has exited.
  void closeWriteEnd();

  // The next line without its newline; nothing when `timeout` passes or the agent has closed its end.
  // Throws BenchFailure on a read error or an interruption (Ctrl-C).
  std::optional<std::string> readLine(std::chrono::milliseconds timeout);
  // Whether the agent has closed its end (readLine saw end-of-file): it has exited or is exiting.
  bool ended() const { return ended_; }

  // withCommands only: sends `line` and a newline to the agent. Throws BenchFailure when the agent is gone.
  void writeLine(const std::string& line);

 private:
  struct CommandsTag {};
  explicit AgentPipe(CommandsTag);

  int readFd_ = -1;   // the benchmark's end (withCommands: for writing too)
  int writeFd_ = -1;  // the agent's end, until closeWriteEnd
  bool commands_ = false;
  bool ended_ = false;
  std::string buffered_;  // read but not yet returned
};

}  // namespace wsync::bench
