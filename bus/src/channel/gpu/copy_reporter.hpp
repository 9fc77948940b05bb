#pragma once
// Private to bus/gpu: how a channel learns that its copy kernel ended, and the checksum lanes it folded, without
// submitting more work to the GPU after the kernel. The kernel's last block writes both to pinned host memory
// (HostCopyReport); the host reads that memory. The usual way (a memset before, a copy of the lanes back and an
// event after the kernel) is three more submissions, each on the round's critical path (docs/gpu-channels.md,
// "cuda_ipc", has the measurement).
#include <cstdint>
#include <optional>

#include <cuda_runtime_api.h>
#include <tl/expected.hpp>

#include "channel/gpu/copy_kernel.hpp"
#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus::gpu::detail {

class CopyReporter {
 public:
  // On the current device.
  static tl::expected<CopyReporter, ChannelFailure> create();
  CopyReporter() = default;
  ~CopyReporter();
  CopyReporter(CopyReporter&& other) noexcept;
  CopyReporter& operator=(CopyReporter&& other) noexcept;
  CopyReporter(const CopyReporter&) = delete;
  CopyReporter& operator=(const CopyReporter&) = delete;

  // The sums a reporting launch folds into (device memory).
  DeviceChecksumSums* deviceSums() const { return deviceSums_; }
  // Where the next launch reports: each call a new sequence number.
  CopyReport next();
  // The lanes of `report`'s launch once it has reported; nothing before.
  std::optional<DeviceChecksumSums> reported(const CopyReport& report) const;
  // Zeroes the sums and the block count on `stream`: needed after a reporting launch that may not have run to its
  // end (its enqueue failed half way), since only a launch's end leaves them at 0.
  tl::expected<void, ChannelFailure> reset(cudaStream_t stream);

 private:
  DeviceChecksumSums* deviceSums_ = nullptr;
  std::uint32_t* doneBlocks_ = nullptr;  // device memory
  HostCopyReport* host_ = nullptr;       // pinned, mapped
  HostCopyReport* hostOnDevice_ = nullptr;
  std::uint64_t sequence_ = 0;
};

}  // namespace wsync::bus::gpu::detail
