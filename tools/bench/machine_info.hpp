#pragma once
// What a result was measured on, so that figures from different machines are never compared unknowingly.
#include <string>

namespace wsync::bench {

struct MachineInfo {
  std::string cpuModel;       // /proc/cpuinfo "model name"
  bool virtualised = false;   // the "hypervisor" CPU flag
  long onlineCpus = 0;        // sysconf(_SC_NPROCESSORS_ONLN)
  int usableCpus = 0;         // in this process's affinity mask
  std::string kernel;         // uname: sysname release machine
  std::string dateUtc;        // ISO 8601
  std::string commit;         // --commit, else `git describe --always --dirty` in the source tree, else "unknown"
  std::string zmqVersion;
  std::string compiler;
  std::string buildType;
};

MachineInfo describeMachine(const std::string& commitOverride);

}  // namespace wsync::bench
