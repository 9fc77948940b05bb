// What a soak samples from /proc and the file system (soak.hpp).
#include "soak.hpp"

#include <dirent.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <wsync/bus/state/control_block.hpp>

namespace wsync::bench {
namespace {

constexpr std::uint64_t kKiB = 1024;

// The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses, hence the last
// ')'): index 0 is field 3 (state), index n is field n + 3 of proc(5).
std::vector<std::string> statFields(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return {};
  const auto close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(std::move(field));
  return fields;
}

// proc(5) field numbers, as indexes of statFields.
constexpr std::size_t kStateField = 3 - 3;
constexpr std::size_t kParentField = 4 - 3;
constexpr std::size_t kUserTimeField = 14 - 3;
constexpr std::size_t kSystemTimeField = 15 - 3;
constexpr std::size_t kChildUserTimeField = 16 - 3;
constexpr std::size_t kChildSystemTimeField = 17 - 3;

std::uint64_t number(const std::string& text) { return std::strtoull(text.c_str(), nullptr, 10); }

std::uint32_t directoryEntries(const std::string& path, bool& opened) {
  DIR* directory = ::opendir(path.c_str());
  opened = directory != nullptr;
  if (directory == nullptr) return 0;
  std::uint32_t count = 0;
  while (const dirent* entry = ::readdir(directory)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) ++count;
  }
  ::closedir(directory);
  return count;
}

// Entries of `path` named `stem`, or `stem` followed by one of `separators` and more: "wsync-soak-1" must not
// count the segments of a bus called "wsync-soak-12".
std::uint32_t countNamed(const std::string& path, const std::string& stem, std::string_view separators) {
  DIR* directory = ::opendir(path.c_str());
  if (directory == nullptr) return 0;
  std::uint32_t count = 0;
  while (const dirent* entry = ::readdir(directory)) {
    const std::string_view name(entry->d_name);
    if (!name.starts_with(stem)) continue;
    if (name.size() == stem.size() || separators.find(name[stem.size()]) != std::string_view::npos) ++count;
  }
  ::closedir(directory);
  return count;
}

}  // namespace

ProcessUsage readProcessUsage(pid_t pid) {
  ProcessUsage usage;
  const std::string base = "/proc/" + std::to_string(pid);
  std::ifstream status(base + "/status");
  if (!status) return usage;
  for (std::string key; status >> key;) {
    std::uint64_t* bytes = key == "VmRSS:"      ? &usage.rssBytes
                           : key == "RssAnon:"  ? &usage.anonBytes
                           : key == "RssShmem:" ? &usage.shmemBytes
                                                : nullptr;
    if (bytes != nullptr) {
      std::uint64_t kib = 0;
      status >> kib;
      *bytes = kib * kKiB;
    } else if (key == "Threads:") {
      status >> usage.threads;
    }
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  bool opened = false;
  usage.fds = directoryEntries(base + "/fd", opened);
  const std::vector<std::string> fields = statFields(pid);
  if (fields.size() > kChildSystemTimeField) {
    usage.cpuTicks = number(fields[kUserTimeField]) + number(fields[kSystemTimeField]);
    usage.childCpuTicks = number(fields[kChildUserTimeField]) + number(fields[kChildSystemTimeField]);
  }
  // A zombie has a status file but no memory and no descriptors: it is not alive in the sense that matters here.
  usage.alive = opened && !fields.empty() && fields[kStateField] != "Z";
  return usage;
}

ChildProcesses countChildren(pid_t parent) {
  ChildProcesses children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  const std::string parentText = std::to_string(parent);
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::vector<std::string> fields = statFields(static_cast<pid_t>(pid));
    if (fields.size() <= kParentField || fields[kParentField] != parentText) continue;
    ++children.count;
    if (fields[kStateField] == "Z") ++children.zombies;
  }
  ::closedir(proc);
  return children;
}

BusResidue countBusResidue(const std::string& busName, const std::string& runtimeDir) {
  BusResidue residue;
  residue.shmSegments = countNamed("/dev/shm", bus::controlBlockSegmentName(busName), "-.");
  residue.runtimeFiles = countNamed(runtimeDir, busName, ".");
  return residue;
}

}  // namespace wsync::bench
