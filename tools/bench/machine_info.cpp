#include "machine_info.hpp"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include <zmq.hpp>

namespace wsync::bench {
namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

// The value of the first "key : value" line of /proc/cpuinfo with this key.
std::string cpuinfoField(const std::string& key) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return {};
}

std::string gitDescribe() {
#ifdef WSYNC_BENCH_SOURCE_DIR
  const std::string command =
      std::string("git -C '") + WSYNC_BENCH_SOURCE_DIR + "' describe --always --dirty --abbrev=12 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  std::array<char, 128> buffer{};
  std::string output;
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) output += buffer.data();
  const int status = ::pclose(pipe);
  return status == 0 ? trim(output) : std::string();
#else
  return {};
#endif
}

std::string utcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text.data();
}

}  // namespace

MachineInfo describeMachine(const std::string& commitOverride) {
  MachineInfo info;
  info.cpuModel = cpuinfoField("model name");
  if (info.cpuModel.empty()) info.cpuModel = "unknown";
  info.virtualised = (" " + cpuinfoField("flags") + " ").find(" hypervisor ") != std::string::npos;
  info.onlineCpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) info.usableCpus = CPU_COUNT(&set);

  utsname names{};
  if (::uname(&names) == 0) {
    info.kernel = std::string(names.sysname) + " " + names.release + " " + names.machine;
  }
  info.dateUtc = utcNow();
  info.commit = !commitOverride.empty() ? commitOverride : gitDescribe();
  if (info.commit.empty()) info.commit = "unknown";

  const auto [major, minor, patch] = zmq::version();
  info.zmqVersion = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
#if defined(__clang__)
  info.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  info.compiler = std::string("gcc ") + __VERSION__;
#else
  info.compiler = "unknown";
#endif
#ifdef WSYNC_BENCH_BUILD_TYPE
  info.buildType = WSYNC_BENCH_BUILD_TYPE;
#endif
  if (info.buildType.empty()) info.buildType = "unspecified";
  return info;
}

}  // namespace wsync::bench
