#include "bus_residue.hpp"

#include <dirent.h>

#include <string_view>

#include <wsync/bus/state/control_block.hpp>

namespace wsync::bench {
namespace {

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

BusResidue countBusResidue(const std::string& busName, const std::string& runtimeDir) {
  BusResidue residue;
  residue.shmSegments = countNamed("/dev/shm", bus::controlBlockSegmentName(busName), "-.");
  residue.runtimeFiles = countNamed(runtimeDir, busName, ".");
  return residue;
}

}  // namespace wsync::bench
