// GpuResources in a build without CUDA: the GPU channels are refused, naming why.
#include "gpu_resources.hpp"

namespace wsync::coordinator {

namespace {
constexpr const char* kNoCuda = "this wsync-coordinator was built without the CUDA Toolkit: only the shm channel";
}  // namespace

struct GpuResources::State {};

GpuResources::GpuResources(std::string /*busName*/) : state_(std::make_unique<State>()) {}
GpuResources::~GpuResources() = default;

tl::expected<std::vector<std::uint8_t>, std::string> GpuResources::newNcclUniqueId() {
  return tl::unexpected(std::string(kNoCuda));
}

tl::expected<std::string, std::string> GpuResources::cudaIpcSegment() { return tl::unexpected(std::string(kNoCuda)); }

void GpuResources::abortCudaIpc(std::uint64_t /*round*/) {}

std::uint32_t GpuResources::maxCudaIpcReceivers() const { return 0; }

}  // namespace wsync::coordinator
