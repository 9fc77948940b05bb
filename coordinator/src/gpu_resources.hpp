#pragma once
// What the coordinator creates for the GPU channels: NCCL unique ids (so that users never pick an address or a
// port for a communicator) and the cuda_ipc segment. Compiled from gpu_resources_cuda.cpp in builds with CUDA and
// from gpu_resources_host.cpp otherwise, where every request is refused with the reason.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tl/expected.hpp>

namespace wsync::coordinator {

class GpuResources {
 public:
  explicit GpuResources(std::string busName);
  ~GpuResources();
  GpuResources(const GpuResources&) = delete;
  GpuResources& operator=(const GpuResources&) = delete;

  // A fresh NCCL unique id (NCCL's bootstrap root then runs in this process until every rank has joined), or why
  // none can be made: no CUDA in this build, or no libnccl.so.2 on this host.
  tl::expected<std::vector<std::uint8_t>, std::string> newNcclUniqueId();
  // The name of the cuda_ipc segment, created on first use ("wsync-<uid>-<bus>-ipc", mode 0600).
  tl::expected<std::string, std::string> cudaIpcSegment();
  // Makes every cuda_ipc sender and receiver waiting on `round` give up.
  void abortCudaIpc(std::uint64_t round);
  // Receivers a cuda_ipc round can take (0 in a build without CUDA: no such round runs).
  std::uint32_t maxCudaIpcReceivers() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace wsync::coordinator
