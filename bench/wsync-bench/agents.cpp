#include "agents.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

constexpr std::string_view kHostPlaceholder = "{host}";

bool executable(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && ::access(path.c_str(), X_OK) == 0;
}

// `name` in the first folder of $PATH that has it as an executable (ChildProcess execs a path, as execve does).
std::string onPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string_view folders = path != nullptr ? path : "";
  while (!folders.empty()) {
    const std::size_t colon = folders.find(':');
    const std::filesystem::path candidate = std::filesystem::path(folders.substr(0, colon)) / name;
    if (executable(candidate)) return candidate.string();
    folders = colon == std::string_view::npos ? std::string_view() : folders.substr(colon + 1);
  }
  throw BenchFailure("launcher '" + name + "': not found on PATH; give its path");
}

}  // namespace

AgentPlacement AgentPlacement::across(std::vector<std::string> hosts, const std::string& launcher) {
  AgentPlacement placement;
  placement.hosts = std::move(hosts);
  std::istringstream words(launcher);
  for (std::string word; words >> word;) placement.launcher.push_back(word);
  if (placement.launcher.empty()) throw BenchFailure("agents on other hosts need a launcher (--spawn-via)");
  std::string& program = placement.launcher.front();
  if (program.find('/') == std::string::npos) program = onPath(program);
  return placement;
}

std::vector<std::string> AgentPlacement::command(const std::string& host, const std::string& program,
                                                 const std::vector<std::string>& args) const {
  if (launcher.empty()) throw BenchFailure("agents on host " + host + " need a launcher (--spawn-via)");
  std::vector<std::string> words;
  for (std::string word : launcher) {
    for (std::size_t at = word.find(kHostPlaceholder); at != std::string::npos;
         at = word.find(kHostPlaceholder, at + host.size())) {
      word.replace(at, kHostPlaceholder.size(), host);
    }
    words.push_back(std::move(word));
  }
  words.push_back(program);
  words.insert(words.end(), args.begin(), args.end());
  return words;
}

void Agents::start(std::string label, const std::string& agent, const nlohmann::json& options, bool linked) {
  // The resolved path rather than /proc/self/exe itself, so that errors name a real file (on every host: they share
  // the file system).
  static const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> command{self, agent, options.dump()};
  if (placement_.remote()) {
    const std::string& host = placement_.hostOf(started_);
    label += " on " + host;
    command = placement_.command(host, self, {agent, options.dump()});
  }
  ++started_;
  auto pipe = linked ? std::make_unique<LinePipe>() : nullptr;
  const int peer = pipe ? pipe->peerFd() : -1;
  const cli::ChildOptions childOptions{
      .stdinFd = peer, .stdoutFd = peer, .deathSignal = SIGKILL, .stopGrace = kStopGrace};
  const std::string program = command.front();
  command.erase(command.begin());
  agents_.push_back(Agent{std::move(label), std::move(pipe), cli::ChildProcess::spawn(program, command, childOptions)});
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
