#include "wsync/bus/core/process_identity.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

namespace wsync::bus {
namespace {

struct ProcStat {
  char state = '?';
  std::uint64_t startTicks = 0;
};

// /proc/PID/stat: "pid (comm) state ppid ... starttime(22) ..."; comm may hold spaces and parentheses, so the
// fields are counted from the last ')'.
std::optional<ProcStat> readProcStat(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!file || !std::getline(file, line)) return std::nullopt;
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  ProcStat stat;
  std::string skipped;
  fields >> stat.state;
  for (int field = 4; field < 22 && fields; ++field) fields >> skipped;  // ppid .. priority, nice, threads, itreal
  fields >> stat.startTicks;
  if (!fields) return std::nullopt;
  return stat;
}

}  // namespace

ProcessIdentity currentProcess() {
  const pid_t pid = ::getpid();
  return ProcessIdentity{static_cast<std::uint32_t>(pid), processStartTicks(pid).value_or(0)};
}

std::optional<std::uint64_t> processStartTicks(pid_t pid) {
  auto stat = readProcStat(pid);
  if (!stat) return std::nullopt;
  return stat->startTicks;
}

bool isAlive(const ProcessIdentity& identity) {
  if (identity.pid == 0) return false;
  const auto pid = static_cast<pid_t>(identity.pid);
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  auto stat = readProcStat(pid);
  if (!stat) return true;  // no /proc to ask: the pid exists, assume it is the same process
  // A killed process stays a zombie until its parent reaps it; it holds nothing any more.
  if (stat->state == 'Z' || stat->state == 'X') return false;
  return identity.startTicks == 0 || stat->startTicks == identity.startTicks;
}

}  // namespace wsync::bus
