#pragma once
// What a bus has in the file system: its shared-memory segments in /dev/shm (control block "wsync-<uid>-<bus>",
// arena "...-shm", and anything else named after the bus) and its files in the runtime folder (sockets
// "<bus>.req" and "<bus>.evt"). Counted over a soak run: they must not accumulate.
#include <cstdint>
#include <string>

namespace wsync::bench {

struct BusResidue {
  std::uint32_t shmSegments = 0;   // /dev/shm entries of the bus
  std::uint32_t runtimeFiles = 0;  // runtime-folder entries of the bus
};

// `runtimeDir` as bus::runtimeDirectory() gives it.
BusResidue countBusResidue(const std::string& busName, const std::string& runtimeDir);

}  // namespace wsync::bench
