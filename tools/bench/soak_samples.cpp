// What a soak samples from /proc and the file system (soak.hpp).
#include <dirent.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include <wsync/bus/state/control_block.hpp>

#include "machine_load.hpp"
#include "soak.hpp"

namespace wsync::bench {
namespace {

// Entries of `path` named `stem`, or `stem` followed by one of `separators` and more ("wsync-soak-1" must not count
// the segments of a bus called "wsync-soak-12"); every entry but . and .. when `stem` is empty. Nothing when the
// folder cannot be opened.
std::optional<std::uint32_t> countEntries(const std::string& path, const std::string& stem = "",
                                          std::string_view separators = "") {
  DIR* directory = ::opendir(path.c_str());
  if (directory == nullptr) return std::nullopt;
  std::uint32_t count = 0;
  while (const dirent* entry = ::readdir(directory)) {
    const std::string_view name(entry->d_name);
    if (stem.empty()) {
      if (name != "." && name != "..") ++count;
    } else if (name.starts_with(stem) &&
               (name.size() == stem.size() || separators.find(name[stem.size()]) != std::string_view::npos)) {
      ++count;
    }
  }
  ::closedir(directory);
  return count;
}

}  // namespace

ProcessUsage readProcessUsage(pid_t pid) {
  ProcessUsage usage;
  const std::string base = "/proc/" + std::to_string(pid);
  std::ifstream status(base + "/status");
  for (std::string key; status >> key;) {
    std::uint64_t* bytes = key == "VmRSS:"      ? &usage.rssBytes
                           : key == "RssAnon:"  ? &usage.anonBytes
                           : key == "RssShmem:" ? &usage.shmemBytes
                                                : nullptr;
    if (bytes != nullptr && status >> *bytes) *bytes *= 1024;  // kB
    if (key == "Threads:") status >> usage.threads;
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  const auto fds = countEntries(base + "/fd");
  const std::vector<std::string> fields = procStatFields(pid);
  usage.fds = fds.value_or(0);
  // A zombie has a status file but no memory and no descriptors: it is not alive in the sense that matters here.
  usage.alive = fds.has_value() && !fields.empty() && fields[0] != "Z";
  return usage;
}

std::pair<std::uint32_t, std::uint32_t> countChildren(pid_t parent) {
  std::uint32_t children = 0;
  std::uint32_t zombies = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return {0, 0};
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::vector<std::string> fields = procStatFields(static_cast<pid_t>(pid));  // [0] state, [1] parent
    if (fields.size() < 2 || fields[1] != std::to_string(parent)) continue;
    ++children;
    if (fields[0] == "Z") ++zombies;
  }
  ::closedir(proc);
  return {children, zombies};
}

std::pair<std::uint32_t, std::uint32_t> countBusResidue(const std::string& busName, const std::string& runtimeDir) {
  return {countEntries("/dev/shm", bus::controlBlockSegmentName(busName), "-.").value_or(0),
          countEntries(runtimeDir, busName, ".").value_or(0)};
}

}  // namespace wsync::bench
