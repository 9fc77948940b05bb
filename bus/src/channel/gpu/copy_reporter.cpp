#include "channel/gpu/copy_reporter.hpp"

#include <utility>

#include "channel/gpu/cuda_check.hpp"

namespace wsync::bus::gpu::detail {

tl::expected<CopyReporter, ChannelFailure> CopyReporter::create() {
  CopyReporter reporter;
  WSYNC_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&reporter.deviceSums_), sizeof(DeviceChecksumSums)));
  WSYNC_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&reporter.doneBlocks_), sizeof(std::uint32_t)));
  WSYNC_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&reporter.host_), sizeof(HostCopyReport), cudaHostAllocMapped));
  WSYNC_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&reporter.hostOnDevice_), reporter.host_, 0));
  *reporter.host_ = HostCopyReport{};
  WSYNC_CUDA_TRY(cudaMemset(reporter.deviceSums_, 0, sizeof(DeviceChecksumSums)));
  WSYNC_CUDA_TRY(cudaMemset(reporter.doneBlocks_, 0, sizeof(std::uint32_t)));
  WSYNC_CUDA_TRY(cudaDeviceSynchronize());
  return reporter;
}

CopyReporter::~CopyReporter() {
  cudaFree(deviceSums_);
  cudaFree(doneBlocks_);
  if (host_ != nullptr) cudaFreeHost(host_);
}

CopyReporter::CopyReporter(CopyReporter&& other) noexcept
    : deviceSums_(std::exchange(other.deviceSums_, nullptr)),
      doneBlocks_(std::exchange(other.doneBlocks_, nullptr)),
      host_(std::exchange(other.host_, nullptr)),
      hostOnDevice_(std::exchange(other.hostOnDevice_, nullptr)),
      sequence_(other.sequence_) {}

CopyReporter& CopyReporter::operator=(CopyReporter&& other) noexcept {
  if (this != &other) {
    CopyReporter gone(std::move(*this));
    deviceSums_ = std::exchange(other.deviceSums_, nullptr);
    doneBlocks_ = std::exchange(other.doneBlocks_, nullptr);
    host_ = std::exchange(other.host_, nullptr);
    hostOnDevice_ = std::exchange(other.hostOnDevice_, nullptr);
    sequence_ = other.sequence_;
  }
  return *this;
}

CopyReport CopyReporter::next() {
  return CopyReport{.host = hostOnDevice_, .doneBlocks = doneBlocks_, .sequence = ++sequence_};
}

std::optional<DeviceChecksumSums> CopyReporter::reported(const CopyReport& report) const {
  // The device writes the sequence last, after a system-wide fence: an acquire load of it orders the lanes' loads.
  if (__atomic_load_n(&host_->sequence, __ATOMIC_ACQUIRE) != report.sequence) return std::nullopt;
  DeviceChecksumSums sums;
  sums.lane[0] = __atomic_load_n(&host_->lane[0], __ATOMIC_RELAXED);
  sums.lane[1] = __atomic_load_n(&host_->lane[1], __ATOMIC_RELAXED);
  return sums;
}

tl::expected<void, ChannelFailure> CopyReporter::reset(cudaStream_t stream) {
  WSYNC_CUDA_TRY(cudaMemsetAsync(deviceSums_, 0, sizeof(DeviceChecksumSums), stream));
  WSYNC_CUDA_TRY(cudaMemsetAsync(doneBlocks_, 0, sizeof(std::uint32_t), stream));
  return {};
}

}  // namespace wsync::bus::gpu::detail
