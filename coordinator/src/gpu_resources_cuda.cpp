// GpuResources in a build with CUDA. Neither needs a GPU on the coordinator's host: a unique id is NCCL's bootstrap
// address (NCCL is loaded at run time), the cuda_ipc segment plain shared memory.
#include <unistd.h>

#include <cstring>

#include "gpu_resources.hpp"
#include "wsync/bus/gpu/cuda_ipc_channel.hpp"
#include "wsync/bus/gpu/gpu_runtime.hpp"

namespace wsync::coordinator {

struct GpuResources::State {
  std::string busName;
  std::unique_ptr<bus::gpu::CudaIpcSegment> ipc;
};

GpuResources::GpuResources(std::string busName) : state_(std::make_unique<State>()) {
  state_->busName = std::move(busName);
}

GpuResources::~GpuResources() = default;

tl::expected<std::vector<std::uint8_t>, std::string> GpuResources::newNcclUniqueId() {
  auto id = bus::gpu::makeNcclUniqueId();
  if (!id) return tl::unexpected("no NCCL unique id: " + id.error().describe());
  std::vector<std::uint8_t> bytes(id->size());
  std::memcpy(bytes.data(), id->data(), id->size());
  return bytes;
}

tl::expected<std::string, std::string> GpuResources::cudaIpcSegment() {
  if (!state_->ipc) {
    bus::gpu::IpcGeometry geometry;
    geometry.maxReceivers = bus::gpu::kMaxIpcReceivers;
    const std::string name = "wsync-" + std::to_string(getuid()) + "-" + state_->busName + "-ipc";
    auto segment = bus::gpu::CudaIpcSegment::create(name, geometry);
    if (!segment) return tl::unexpected("cannot create the cuda_ipc segment: " + segment.error().describe());
    state_->ipc = std::move(*segment);
  }
  return state_->ipc->name();
}

std::uint32_t GpuResources::maxCudaIpcReceivers() const { return bus::gpu::kMaxIpcReceivers; }

void GpuResources::abortCudaIpc(std::uint64_t round) {
  if (state_->ipc) state_->ipc->abort(round);
}

}  // namespace wsync::coordinator
