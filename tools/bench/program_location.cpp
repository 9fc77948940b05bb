#include "program_location.hpp"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

bool executable(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string locateProgram(const std::string& name, const std::string& binDir, const std::string& builtPath) {
  if (!binDir.empty()) {
    const std::filesystem::path given = std::filesystem::path(binDir) / name;
    if (!executable(given)) throw BenchFailure("--bin-dir: no executable " + given.string());
    return given.string();
  }
  std::error_code error;
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", error);
  const std::filesystem::path sibling = error ? std::filesystem::path() : self.parent_path() / name;
  if (!sibling.empty() && executable(sibling)) return sibling.string();
  if (!builtPath.empty() && executable(builtPath)) return builtPath;
  throw BenchFailure("cannot find " + name + ": not beside " + self.string() +
                     (builtPath.empty() ? "" : " nor at " + builtPath) + "; give its folder with --bin-dir");
}

}  // namespace wsync::bench
