#include "agents.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

bool executable(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

void Agents::start(std::string label, const std::string& agent, const nlohmann::json& options, bool linked) {
  // The resolved path rather than /proc/self/exe itself, so that errors name a real file.
  static const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto pipe = linked ? std::make_unique<LinePipe>() : nullptr;
  const int peer = pipe ? pipe->peerFd() : -1;
  const tools::ChildOptions childOptions{
      .stdinFd = peer, .stdoutFd = peer, .deathSignal = SIGKILL, .stopGrace = kStopGrace};
  agents_.push_back(Agent{std::move(label), std::move(pipe),
                          tools::ChildProcess::spawn(self, {agent, options.dump()}, childOptions)});
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
  return std::any_of(agents_.begin(), agents_.end(), [](const Agent& agent) { return agent.process.ended(); });
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

std::string locateProgram(const std::string& name, const std::string& binDir, const std::string& builtPath) {
  if (!binDir.empty()) {
    const std::filesystem::path given = std::filesystem::path(binDir) / name;
    if (!executable(given)) throw BenchFailure("--bin-dir: no executable " + given.string());
    return given.string();
  }
  std::error_code error;
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", error);
  if (!error && executable(self.parent_path() / name)) return (self.parent_path() / name).string();
  if (executable(builtPath)) return builtPath;
  throw BenchFailure("cannot find " + name + ": not beside " + self.string() + " nor at " + builtPath +
                     "; give its folder with --bin-dir");
}

}  // namespace wsync::bench
