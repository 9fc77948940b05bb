#pragma once
// The processes a measurement starts: agents (this executable with a hidden subcommand, options as JSON) and the real
// programs (locateProgram). Every child dies with the benchmark and is stopped and reaped on every exit path.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <wsync/cli/child_process.hpp>

#include "line_pipe.hpp"

namespace wsync::bench {

// Agents get this long to go after SIGTERM before SIGKILL.
inline constexpr std::chrono::milliseconds kStopGrace{2000};
// The real programs stop on SIGTERM within a loop step or a redraw (250 ms at most); then SIGKILL.
inline constexpr std::chrono::milliseconds kProgramStopGrace{5000};
// An agent idle this long takes the benchmark for gone or stuck and exits.
inline constexpr std::chrono::milliseconds kAgentIdleTimeout{60000};
// An agent exits right after its last report; this long after it, it is stuck.
inline constexpr std::chrono::milliseconds kAgentExitTimeout{10000};

// Where agents run: on this host, or round-robin on other hosts through a launcher, the words of a command that runs
// a program on a host (`tests/hosts/rig.sh exec RIG {host} --`: "{host}" in any word becomes the host). The launcher
// must exec the program in the end, so that the pid stays the program's: signals and the death signal reach it, its
// exit status is the benchmark's to read (ssh would not do).
struct AgentPlacement {
  std::vector<std::string> hosts;     // empty: this host
  std::vector<std::string> launcher;  // the first word: a path

  // `launcher`: words separated by spaces (no quoting), the first a path or a program on PATH, which is looked up
  // now. Throws BenchFailure when it is missing or not found.
  static AgentPlacement across(std::vector<std::string> hosts, const std::string& launcher);

  bool remote() const { return !hosts.empty(); }
  // Its `index`-th agent's host, round-robin.
  const std::string& hostOf(std::size_t index) const { return hosts[index % hosts.size()]; }
  // The launcher's words for `host`, then `program` and `args`; throws BenchFailure when there is no launcher.
  std::vector<std::string> command(const std::string& host, const std::string& program,
                                   const std::vector<std::string>& args) const;
};

class Agents {
 public:
  explicit Agents(AgentPlacement placement = {}) : placement_(std::move(placement)) {}
  Agents(const Agents&) = delete;
  Agents& operator=(const Agents&) = delete;
  ~Agents() { stopAll(); }

  // Starts `wsync-bench AGENT OPTIONS_JSON` (on the next host of the placement); `label` names it in errors, with
  // its host; `linked`: a LinePipe as its stdin and stdout.
  void start(std::string label, const std::string& agent, const nlohmann::json& options, bool linked = false);
  std::size_t size() const { return agents_.size(); }
  const std::string& label(std::size_t index) const { return agents_[index].label; }
  LinePipe& pipe(std::size_t index) { return *agents_[index].pipe; }

  // The next line of an agent; throws BenchFailure naming it when it died or was silent for `timeout`.
  std::string readLine(std::size_t index, std::chrono::milliseconds timeout, const std::string& waitingFor);

  // Throws BenchFailure naming every agent that has exited: the cause when a wait runs out.
  void throwIfAnyExited();
  // Without reaping: safe from a watchdog thread as long as nobody starts or stops agents meanwhile.
  bool anyExited() const;
  // Waits up to `timeout` for every agent to exit by itself; throws unless all exited with status 0.
  void waitForAll(std::chrono::milliseconds timeout);
  // SIGTERM to all, then each gets kStopGrace before SIGKILL; all reaped when it returns.
  void stopAll() noexcept;

 private:
  struct Agent {
    std::string label;
    std::unique_ptr<LinePipe> pipe;  // before the process: closed after it is stopped
    cli::ChildProcess process;
  };

  AgentPlacement placement_;
  std::size_t started_ = 0;  // agents started so far: the next one's place in the round-robin
  std::vector<Agent> agents_;
};

// Files a run leaves behind, its bus names being unique to it (libzmq 4.3 keeps ipc socket files; a killed
// coordinator leaves its segments): removed when this goes, after the sockets and control blocks that use them.
class RunFiles {
 public:
  RunFiles() = default;
  RunFiles(const RunFiles&) = delete;
  RunFiles& operator=(const RunFiles&) = delete;
  ~RunFiles() {
    for (const std::string& path : paths_) std::remove(path.c_str());
  }
  void add(std::string path) { paths_.push_back(std::move(path)); }
  void addEndpoint(std::string_view endpoint) {
    if (endpoint.starts_with("ipc://")) add(std::string(endpoint.substr(6)));
  }

 private:
  std::vector<std::string> paths_;
};

// `name` in `binDir` when given; else beside this executable (an install, a copied bin/); else `builtPath`.
std::string locateProgram(const std::string& name, const std::string& binDir, const std::string& builtPath);

}  // namespace wsync::bench
