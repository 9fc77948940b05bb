#pragma once
// The GPUs, drivers and NCCL a `wsync-bench gpu` result was measured with. Read in the benchmark process without
// creating a CUDA context (no device memory is taken there): device properties, versions and the environment.
#include <cstdint>
#include <string>
#include <vector>

namespace wsync::bench {

struct GpuDeviceInfo {
  int index = 0;
  std::string name;
  std::uint64_t memoryBytes = 0;
  std::string pciBusId;    // domain:bus:device.function
  std::string capability;  // compute capability, e.g. "9.0"
  int multiprocessors = 0;
};

struct GpuInfo {
  std::string hostName;
  int deviceCount = 0;          // visible to this process (CUDA_VISIBLE_DEVICES applies)
  std::string noDeviceReason;   // why the CUDA runtime sees none, when deviceCount is 0
  std::string driverVersion;    // CUDA version the driver supports, e.g. "13.0"; "none" without a driver
  std::string runtimeVersion;   // of the CUDA runtime linked in
  std::string ncclVersion;      // of the libnccl.so.2 loaded, or why none could be
  std::vector<GpuDeviceInfo> devices;
  std::vector<std::vector<int>> peerAccess;  // [i][j]: device i can access device j's memory (1), or not (0)
  std::vector<std::string> ncclEnvironment;  // every NCCL_* variable, as NAME=VALUE, sorted
};

// Sets NCCL_NVLS_ENABLE=0 unless the environment already says otherwise, before any rank is started: NVLink
// SHARP (multicast) is left off on the machines these runs are made on, and its buffers would count as the
// channel's memory.
void prepareGpuEnvironment();

GpuInfo describeGpus();

}  // namespace wsync::bench
