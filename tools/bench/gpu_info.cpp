#include "gpu.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#include <wsync/bus/channel/gpu/gpu_runtime.hpp>

extern char** environ;

namespace wsync::bench {
namespace {

// "12080" -> "12.8": CUDA versions are 1000 x major + 10 x minor.
std::string cudaVersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

// NCCL 2.9 and later: 10000 x major + 100 x minor + patch.
std::string ncclVersionText(int version) {
  return std::to_string(version / 10000) + "." + std::to_string((version % 10000) / 100) + "." +
         std::to_string(version % 100);
}

std::string pciBusId(const cudaDeviceProp& properties) {
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%04x:%02x:%02x.0", static_cast<unsigned>(properties.pciDomainID),
                static_cast<unsigned>(properties.pciBusID), static_cast<unsigned>(properties.pciDeviceID));
  return text.data();
}

}  // namespace

void prepareGpuEnvironment() { ::setenv("NCCL_NVLS_ENABLE", "0", 0); }

GpuInfo describeGpus() {
  GpuInfo info;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) info.hostName = host.data();

  int driver = 0;
  info.driverVersion = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? cudaVersionText(driver) : "none";
  int runtime = 0;
  info.runtimeVersion = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cudaVersionText(runtime) : "unknown";
  const cudaError_t counted = cudaGetDeviceCount(&info.deviceCount);
  if (counted != cudaSuccess) {
    info.deviceCount = 0;
    info.noDeviceReason = std::string(driver == 0 ? "no NVIDIA driver; " : "") + "cudaGetDeviceCount: " +
                          cudaGetErrorName(counted) + " (" + cudaGetErrorString(counted) + ")";
    cudaGetLastError();
  } else if (info.deviceCount == 0) {
    info.noDeviceReason = "the CUDA runtime sees no device";
  }
  for (int index = 0; index < info.deviceCount; ++index) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
      cudaGetLastError();
      info.devices.push_back(GpuDeviceInfo{index, "unknown", 0, "unknown", "unknown", 0});
      continue;
    }
    info.devices.push_back(GpuDeviceInfo{index, properties.name, properties.totalGlobalMem, pciBusId(properties),
                                         std::to_string(properties.major) + "." + std::to_string(properties.minor),
                                         properties.multiProcessorCount});
  }
  info.peerAccess.assign(static_cast<std::size_t>(info.deviceCount),
                         std::vector<int>(static_cast<std::size_t>(info.deviceCount), 0));
  for (int from = 0; from < info.deviceCount; ++from) {
    for (int to = 0; to < info.deviceCount; ++to) {
      int reachable = from == to ? 1 : 0;
      if (from != to && cudaDeviceCanAccessPeer(&reachable, from, to) != cudaSuccess) {
        cudaGetLastError();
        reachable = 0;
      }
      info.peerAccess[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)] = reachable;
    }
  }

  if (auto version = bus::gpu::ncclVersion()) {
    info.ncclVersion = ncclVersionText(*version);
  } else {
    info.ncclVersion = "unavailable: " + version.error().describe();
  }
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (std::strncmp(*variable, "NCCL_", 5) == 0) info.ncclEnvironment.emplace_back(*variable);
  }
  std::sort(info.ncclEnvironment.begin(), info.ncclEnvironment.end());
  return info;
}

}  // namespace wsync::bench
