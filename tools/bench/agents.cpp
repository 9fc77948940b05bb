#include "agents.hpp"

#include <signal.h>

#include <filesystem>

#include "bench_failure.hpp"

namespace wsync::bench {

void Agents::start(std::string label, const std::vector<std::string>& args, Link link) {
  // The resolved path rather than /proc/self/exe itself, so that errors name a real file.
  static const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::optional<LinePipe> pipe;
  if (link != Link::None) pipe.emplace(link == Link::Reports ? LinePipe::reports() : LinePipe::commands());
  const int peer = pipe ? pipe->peerFd() : -1;
  tools::ChildOptions options{.stdinFd = link == Link::Commands ? peer : -1,
                              .stdoutFd = peer,
                              .deathSignal = SIGKILL,
                              .stopGrace = kStopGrace};
  agents_.push_back(Agent{std::move(label), std::move(pipe), tools::ChildProcess::spawn(self, args, options)});
  if (agents_.back().pipe) agents_.back().pipe->closePeer();  // from now on end-of-file means the agent has exited
}

std::string Agents::readLine(std::size_t index, std::chrono::milliseconds timeout, const std::string& waitingFor) {
  if (auto line = pipe(index).readLine(timeout)) return *line;
  throwIfAnyExited();
  throw BenchFailure(label(index) + " said nothing for " + std::to_string(timeout.count()) +
                     " ms while the benchmark waited for " + waitingFor);
}

void Agents::throwIfAnyExited() {
  std::string exited;
  for (Agent& agent : agents_) {
    if (agent.process.running()) continue;
    exited += (exited.empty() ? "" : "; ") + agent.label + " " + agent.process.describeExit();
  }
  // A failing agent has said why on stderr.
  if (!exited.empty()) throw BenchFailure("agent process ended early: " + exited);
}

bool Agents::anyExited() const {
  for (const Agent& agent : agents_) {
    if (agent.process.ended()) return true;
  }
  return false;
}

void Agents::waitForAll(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (Agent& agent : agents_) {
    throwIfInterrupted();
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const std::optional<int> status = agent.process.wait(std::max(left, std::chrono::milliseconds{0}));
    if (!status) throw BenchFailure(agent.label + " still running " + std::to_string(timeout.count()) + " ms on");
    if (*status != 0) throw BenchFailure("agent failed: " + agent.label + " " + agent.process.describeExit());
  }
}

void Agents::stopAll() noexcept {
  for (const Agent& agent : agents_) agent.process.signal(SIGTERM);  // all at once, then each in turn
  agents_.clear();
}

}  // namespace wsync::bench
