#pragma once
// Private to bus/channel/nccl: what an open nccl channel holds (its communicators, streams, staging and events), shared
// by its broadcasts (nccl_channel.cpp) and its region transfers (nccl_regions.cpp).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "channel/gpu/copy_table.hpp"
#include "channel/gpu/cuda_check.hpp"
#include "channel/nccl/nccl_timeline_recorder.hpp"
#include "wsync/bus/channel/nccl/blocking_call_guard.hpp"
#include "wsync/bus/channel/nccl/nccl_channel.hpp"
#include "wsync/bus/channel/nccl/nccl_library.hpp"
#include "wsync/bus/channel/nccl/region_steps.hpp"

namespace wsync::bus::gpu {

using Clock = std::chrono::steady_clock;

// How often a transfer still connecting or an abort draining looks again.
inline constexpr std::chrono::microseconds kPollInterval{100};
// After ncclCommAbort, how long the channel waits for its streams to drain (NCCL's kernels notice the abort flag
// within microseconds; this only bounds a device that stopped answering).
inline constexpr std::chrono::seconds kAbortDrainTimeout{10};
inline constexpr std::uint32_t kMaxBuffers = 8;
// The bucket plan's alignment must keep every piece's start in its tensor a multiple of 8 (the checksum reads
// 8-byte words) and bucket offsets suited to 16-byte vector copies.
inline constexpr std::uint32_t kMinAlignment = 16;

inline ChannelFailure ncclFailure(const NcclLibrary& nccl, ncclComm_t comm, const char* call, ncclResult_t result) {
  std::string detail = std::string(call) + ": " + nccl.getErrorString(result);
  const char* last = nccl.getLastError(comm);
  if (last != nullptr && *last != '\0') detail += std::string(" (") + last + ")";
  return ChannelFailure{ChannelError::CommunicatorError, detail};
}

// Kernel blocks for the copies nothing runs beside: the sender's first pack (no broadcast has started) and a
// receiver's last unpack (every broadcast is done). The whole GPU copies small tensors twice as fast as copyBlocks.
inline constexpr std::uint32_t kUnoverlappedCopyBlocks = 1024;

// How slice `slice` travels: straight between the tensors, or through a staging buffer.
struct SliceRoute {
  bool direct = false;     // its bucket is one piece that fills it: no staging buffer
  std::uint32_t slot = 0;  // staged: the buffer it passes through (waits for it to be free, then frees it)
  std::uint32_t bucket = 0;
  std::uint64_t address = 0;  // what is broadcast: the tensor's bytes (direct) or the buffer's
  std::uint64_t bytes = 0;    // broadcast count
  std::uint64_t payload = 0;  // of which tensor bytes (padding excluded): progress
  std::size_t batch = 0;      // the pack/unpack (or, direct, the checksum-only) batch of the copy table
};

// A region round's layout on this rank (nccl_regions.cpp): its steps, their copies and staging, kept while the plan,
// this rank's buffers and the staging stay the same.
struct NcclRegionState {
  NcclRegionState() = default;
  ~NcclRegionState();
  NcclRegionState(const NcclRegionState&) = delete;
  NcclRegionState& operator=(const NcclRegionState&) = delete;

  std::optional<Digest> key;  // of the layout below: the plan, this rank's side and index, its buffers
  std::optional<RegionSteps> steps;
  std::vector<std::uint32_t> sumsOf;    // per peer index: its slot in the sums, or kNoPeer
  std::vector<std::size_t> chunkBatch;  // per chunk of `steps`, in step order: its batch of `table`
  detail::CopyTable table;
  std::vector<void*> buffers;  // staging, bufferCount of bufferBytes
  std::uint64_t bufferBytes = 0;
  DeviceChecksumSums* deviceSums = nullptr;  // one per peer
  DeviceChecksumSums* hostSums = nullptr;    // pinned, one per peer
  std::size_t sumsCapacity = 0;

  static constexpr std::uint32_t kNoPeer = 0xFFFFFFFFU;
};

struct NcclChannel::State {
  explicit State(bool timelineOn) : timeline(timelineOn) {}

  const NcclLibrary* nccl = nullptr;
  ncclComm_t joined = nullptr;  // what the ranks joined (non-blocking)
  ncclComm_t child = nullptr;   // NcclEnqueue::BlockingChild: the blocking communicator the broadcasts go through
  // NcclEnqueue::BlockingChild: watches the child's calls. When it fires it aborts `joined`, not the child: the
  // abort frees the communicator it is given, and the transfer thread is inside the child. The two share their
  // abort flag (splitShare), which NCCL polls while a call waits for peers: the call returns, and the transfer
  // thread aborts the child after it.
  std::unique_ptr<BlockingCallGuard> guard;
  bool broken = false;
  int device = 0;
  cudaStream_t commStream = nullptr;
  cudaStream_t copyStream = nullptr;
  std::vector<void*> buffers;
  std::uint64_t bufferBytes = 0;
  std::vector<cudaEvent_t> bufferFree;    // per buffer: its last slice broadcast (sender) or unpacked (receiver)
  std::vector<cudaEvent_t> sliceReady;    // per slice: packed (sender) or received (receiver)
  std::vector<cudaEvent_t> sliceDone;     // per slice: broadcast (sender) or unpacked (receiver)
  detail::NcclTimelineRecorder timeline;  // config.timeline; a no-op without it
  cudaEvent_t copyFinished = nullptr;
  cudaEvent_t commFinished = nullptr;
  DeviceChecksumSums* deviceSums = nullptr;
  DeviceChecksumSums* hostSums = nullptr;  // pinned
  detail::CopyTable table;
  std::vector<SliceRoute> routes;
  std::optional<Digest> tensorsKey;    // layout key of the tensors `routes` and `table` were built for
  std::vector<std::uint64_t> planKey;  // ... and of the plan
  std::uint64_t totalBytes = 0;
  std::unique_ptr<NcclRegionState> regions;  // made at the first region transfer

  ~State() {
    guard.reset();  // its thread first: it may abort `joined`
    releaseBuffers();
    for (auto* events : {&bufferFree, &sliceReady, &sliceDone}) {
      for (cudaEvent_t event : *events) cudaEventDestroy(event);
    }
    timeline.release();
    if (copyFinished != nullptr) cudaEventDestroy(copyFinished);
    if (commFinished != nullptr) cudaEventDestroy(commFinished);
    if (deviceSums != nullptr) cudaFree(deviceSums);
    if (hostSums != nullptr) cudaFreeHost(hostSums);
    if (commStream != nullptr) cudaStreamDestroy(commStream);
    if (copyStream != nullptr) cudaStreamDestroy(copyStream);
  }

  // The communicator the broadcasts go through.
  ncclComm_t broadcasts() const { return child != nullptr ? child : joined; }

  void releaseBuffers() {
    for (void* buffer : buffers) {
      if (buffer != nullptr) cudaFree(buffer);
    }
    buffers.clear();
    bufferBytes = 0;
  }

  // Waits while NCCL is still enqueueing or connecting (a non-blocking communicator's ncclInProgress): the first
  // broadcast connects the ranks, and keeps retrying a dead peer, so the cancel probe and the stall timeout apply.
  tl::expected<void, ChannelFailure> settle(ncclComm_t comm, const char* call, ncclResult_t result,
                                            Clock::time_point deadline, const std::function<bool()>& cancel,
                                            Clock::duration stallTimeout) {
    const auto started = Clock::now();
    while (result == ncclInProgress) {
      const auto now = Clock::now();
      if (now > deadline) return fail(ChannelError::Timeout, std::string(call) + " did not complete in time");
      if (cancel && cancel()) return fail(ChannelError::Aborted, std::string("cancelled in ") + call);
      if (now - started > stallTimeout) {
        return fail(ChannelError::Timeout,
                    std::string(call) + " made no progress for " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(stallTimeout).count()) +
                        " ms: a peer is dead or stuck");
      }
      std::this_thread::sleep_for(kPollInterval);
      nccl->commGetAsyncError(comm, &result);
    }
    if (result != ncclSuccess) return tl::unexpected(ncclFailure(*nccl, comm, call, result));
    return {};
  }

  // Kills the communicators (NCCL's kernels return), drains the streams and marks the channel broken.
  void abort() {
    // The joined communicator first: that ends a split still being built, whose thread would fill `child` later.
    if (joined != nullptr) {
      nccl->commAbort(joined);
      joined = nullptr;
    }
    if (ncclComm_t built = std::atomic_ref<ncclComm_t>(child).load(std::memory_order_acquire); built != nullptr) {
      nccl->commAbort(built);
      child = nullptr;
    }
    broken = true;
    const auto drainDeadline = Clock::now() + kAbortDrainTimeout;
    for (cudaStream_t stream : {commStream, copyStream}) {
      while (cudaStreamQuery(stream) == cudaErrorNotReady && Clock::now() < drainDeadline) {
        std::this_thread::sleep_for(kPollInterval);
      }
    }
    cudaGetLastError();
  }
};

}  // namespace wsync::bus::gpu
