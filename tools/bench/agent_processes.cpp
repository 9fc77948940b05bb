#include "agent_processes.hpp"

#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bench_config.hpp"
#include "bench_failure.hpp"
#include "interruption.hpp"

extern char** environ;

namespace wsync::bench {
namespace {

// How often a bounded wait for agents to exit looks again.
constexpr std::chrono::milliseconds kReapPollInterval{5};

std::string selfExecutable() {
  // The resolved path rather than /proc/self/exe itself, so that errors name a real file.
  std::string path(4096, '\0');
  const ssize_t length = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (length <= 0) throw BenchFailure(std::string("cannot resolve /proc/self/exe: ") + std::strerror(errno));
  path.resize(static_cast<std::size_t>(length));
  return path;
}

}  // namespace

void AgentProcesses::spawn(const std::string& label, const std::vector<std::string>& args, int stdoutFd,
                           int stdinFd) {
  static const std::string executable = selfExecutable();
  std::vector<std::string> storage;
  storage.reserve(args.size() + 1);
  storage.push_back(executable);
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // dup2 in the child clears close-on-exec on the copy, so the agent keeps its stdout and no other descriptor of
  // the benchmark's pipes (which are all close-on-exec).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdoutFd >= 0) posix_spawn_file_actions_adddup2(&actions, stdoutFd, STDOUT_FILENO);
  if (stdinFd >= 0) posix_spawn_file_actions_adddup2(&actions, stdinFd, STDIN_FILENO);
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, executable.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) throw BenchFailure("cannot start agent " + label + ": " + std::strerror(error));
  agents_.push_back(Agent{pid, label, false, 0});
}

bool AgentProcesses::poll(Agent& agent) {
  if (agent.reaped) return true;
  int status = 0;
  const pid_t result = ::waitpid(agent.pid, &status, WNOHANG);
  if (result == agent.pid || (result < 0 && errno == ECHILD)) {
    agent.reaped = true;
    agent.status = status;
  }
  return agent.reaped;
}

std::string AgentProcesses::describeExit(const Agent& agent) {
  if (WIFEXITED(agent.status)) {
    // A failing agent has said why on stderr.
    return agent.label + " exited with status " + std::to_string(WEXITSTATUS(agent.status)) +
           (WEXITSTATUS(agent.status) != 0 ? " (its message is above)" : "");
  }
  if (WIFSIGNALED(agent.status)) return agent.label + " was killed by signal " + std::to_string(WTERMSIG(agent.status));
  return agent.label + " ended";
}

void AgentProcesses::throwIfAnyExited() {
  std::string exited;
  for (Agent& agent : agents_) {
    if (poll(agent)) exited += (exited.empty() ? "" : "; ") + describeExit(agent);
  }
  if (!exited.empty()) throw BenchFailure("agent process ended early: " + exited);
}

bool AgentProcesses::anyExited() const {
  for (const Agent& agent : agents_) {
    if (agent.reaped) return true;
    siginfo_t info{};
    // WNOWAIT leaves the agent to be reaped (and described) by the owner.
    if (::waitid(P_PID, static_cast<id_t>(agent.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) {
      return true;
    }
  }
  return false;
}

void AgentProcesses::waitForAll(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (Agent& agent : agents_) all = poll(agent) && all;
    if (all) break;
    throwIfInterrupted();
    if (std::chrono::steady_clock::now() > deadline) {
      throw BenchFailure("agents still running " + std::to_string(timeout.count()) + " ms after their last message");
    }
    std::this_thread::sleep_for(kReapPollInterval);
  }
  for (const Agent& agent : agents_) {
    if (!WIFEXITED(agent.status) || WEXITSTATUS(agent.status) != 0) {
      throw BenchFailure("agent failed: " + describeExit(agent));
    }
  }
}

void AgentProcesses::stopAll() noexcept {
  for (Agent& agent : agents_) {
    if (!poll(agent)) ::kill(agent.pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  for (;;) {
    bool all = true;
    for (Agent& agent : agents_) all = poll(agent) && all;
    if (all || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(kReapPollInterval);
  }
  // SIGKILL cannot be caught: the blocking wait after it is bounded by the kernel tearing the process down.
  for (Agent& agent : agents_) {
    if (agent.reaped) continue;
    ::kill(agent.pid, SIGKILL);
    int status = 0;
    while (::waitpid(agent.pid, &status, 0) < 0 && errno == EINTR) {
    }
    agent.reaped = true;
    agent.status = status;
  }
  agents_.clear();
}

void dieWithParent(pid_t expectedParent) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != expectedParent) std::_Exit(3);
}

}  // namespace wsync::bench
