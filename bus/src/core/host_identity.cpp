#include "wsync/bus/core/host_identity.hpp"

#include <sys/stat.h>

#include <fstream>

#include "wsync/bus/core/text.hpp"

namespace wsync::bus {

namespace {

// Changes with every boot: two machines, or one machine before and after a reboot, never share a key.
std::string bootId() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  return id;
}

// The device and inode of a path: a private tmpfs on /dev/shm (another mount namespace, another container) differs
// in the device, a bind-mounted folder in the inode.
std::string fileIdentity(const char* path) {
  struct stat info {};
  if (::stat(path, &info) != 0) return "?";
  return std::to_string(static_cast<unsigned long long>(info.st_dev)) + "." +
         std::to_string(static_cast<unsigned long long>(info.st_ino));
}

HostIdentity compute() {
  HostIdentity host;
  host.name = hostName();
  host.key = bootId() + "/shm:" + fileIdentity("/dev/shm") + "/pid:" + fileIdentity("/proc/self/ns/pid");
  return host;
}

}  // namespace

const HostIdentity& thisHost() {
  static const HostIdentity host = compute();
  return host;
}

bool onThisHost(std::string_view key, std::string_view name) {
  if (key.empty()) return name == thisHost().name;
  return key == thisHost().key;
}

}  // namespace wsync::bus
