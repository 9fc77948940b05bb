#include "test_environment.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <boost/interprocess/shared_memory_object.hpp>

#include "wsync/bus/state/control_block.hpp"

namespace wsync::test {

namespace {

// Every bus name handed out, so that segments left by killed helper processes are removed when the tests end.
struct IssuedBusNames {
  std::mutex mutex;
  std::vector<std::string> names;
  pid_t owner = ::getpid();

  ~IssuedBusNames() {
    if (::getpid() != owner) return;
    for (const std::string& name : names) {
      boost::interprocess::shared_memory_object::remove(wsync::bus::controlBlockSegmentName(name).c_str());
    }
  }
};

IssuedBusNames& issuedBusNames() {
  static IssuedBusNames issued;
  return issued;
}

}  // namespace

std::string uniqueBusName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  std::string name = prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  IssuedBusNames& issued = issuedBusNames();
  std::lock_guard lock(issued.mutex);
  issued.names.push_back(name);
  return name;
}

const std::string& useTemporaryRuntimeDirectory() {
  static const std::string directory = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "wsync-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    ::setenv("WSYNC_RUNTIME_DIR", pattern.c_str(), 1);
    return pattern;
  }();
  // Removed at exit by the process that made it, not by children that inherited the variable.
  static const struct Cleanup {
    pid_t owner = ::getpid();
    ~Cleanup() {
      if (::getpid() == owner) {
        std::error_code ignored;
        std::filesystem::remove_all(directory, ignored);
      }
    }
  } cleanup;
  return directory;
}

}  // namespace wsync::test
