#pragma once
// The agent processes of a measurement: this executable started again with a hidden subcommand, each optionally
// with a line pipe to the benchmark. They die with the benchmark (a death signal set before the exec) and are stopped
// (SIGTERM, then SIGKILL) and reaped on every exit path, so a killed or failed run leaves none behind.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <wsync/tools/child_process.hpp>

#include "line_pipe.hpp"

namespace wsync::bench {

// Agents get this long to go after SIGTERM before SIGKILL.
inline constexpr std::chrono::milliseconds kStopGrace{2000};
// An agent with nothing to do for this long takes the benchmark for gone or stuck and exits (it also dies with it).
inline constexpr std::chrono::milliseconds kAgentIdleTimeout{60000};
// An agent exits right after its last report; this long after it, it is stuck.
inline constexpr std::chrono::milliseconds kAgentExitTimeout{10000};

class Agents {
 public:
  enum class Link { None, Reports, Commands };  // no pipe; the agent's stdout; its stdin and stdout

  Agents() = default;
  Agents(const Agents&) = delete;
  Agents& operator=(const Agents&) = delete;
  ~Agents() { stopAll(); }

  // Starts this executable with `args`; `label` names the agent in errors. Throws BenchFailure.
  void start(std::string label, const std::vector<std::string>& args, Link link = Link::None);
  std::size_t size() const { return agents_.size(); }
  const std::string& label(std::size_t index) const { return agents_[index].label; }
  LinePipe& pipe(std::size_t index) { return *agents_[index].pipe; }

  // The next line of an agent; throws BenchFailure naming it when it died (the cause, not the symptom) or said
  // nothing for `timeout` while the benchmark waited for `waitingFor`.
  std::string readLine(std::size_t index, std::chrono::milliseconds timeout, const std::string& waitingFor);

  // Throws BenchFailure naming every agent that has exited: called when a wait runs out, to report the cause.
  void throwIfAnyExited();
  // Whether any agent has exited, without reaping: safe from another thread (a watchdog) while the owner is blocked
  // elsewhere, as long as nobody starts or stops agents meanwhile.
  bool anyExited() const;
  // Waits up to `timeout` for every agent to exit by itself; throws unless all exited with status 0.
  void waitForAll(std::chrono::milliseconds timeout);
  // SIGTERM to all, then each gets kStopGrace before SIGKILL; all reaped when it returns.
  void stopAll() noexcept;

 private:
  struct Agent {
    std::string label;
    std::optional<LinePipe> pipe;  // before the process: closed after it is stopped
    tools::ChildProcess process;
  };

  std::vector<Agent> agents_;
};

}  // namespace wsync::bench
