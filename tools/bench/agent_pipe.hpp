#pragma once
// A pipe whose write end becomes an agent's stdout (AgentProcesses::spawn): the agent reports one line per event,
// the benchmark reads them with a bound on every wait. Both ends are close-on-exec, so no other agent inherits them
// and the read end sees end-of-file once this agent is gone.
#include <chrono>
#include <optional>
#include <string>

namespace wsync::bench {

class AgentPipe {
 public:
  AgentPipe();  // throws BenchFailure
  AgentPipe(AgentPipe&& other) noexcept;
  AgentPipe& operator=(AgentPipe&&) = delete;
  AgentPipe(const AgentPipe&) = delete;
  AgentPipe& operator=(const AgentPipe&) = delete;
  ~AgentPipe();

  int writeEnd() const { return writeFd_; }
  // Called once the agent holds its copy: from then on end-of-file means the agent has exited.
  void closeWriteEnd();

  // The next line without its newline; nothing when `timeout` passes or the agent has closed its end.
  // Throws BenchFailure on a read error or an interruption (Ctrl-C).
  std::optional<std::string> readLine(std::chrono::milliseconds timeout);

 private:
  int readFd_ = -1;
  int writeFd_ = -1;
  std::string buffered_;  // read but not yet returned
};

}  // namespace wsync::bench
