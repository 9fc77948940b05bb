#pragma once
// Private to the nccl channel: the timeline of NcclChannelConfig::timeline (nccl_timeline.hpp) as one object that
// the transfer tells what it does, and that does nothing when the timeline is off (no events, no clock reads, every
// CUDA call it would make answered cudaSuccess). On, it brackets every slice's broadcast and copy with CUDA timing
// events, times each broadcast call on the host, and reads them all back once the device is done.
//
// Threading: the transfer's thread only, as the channel.
#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>
#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/nccl/broadcast_slices.hpp"
#include "wsync/bus/channel/nccl/nccl_timeline.hpp"

namespace wsync::bus::gpu::detail {

// The timing events of one slice, in NcclSliceTiming's order.
enum class SliceEvent : std::size_t { BroadcastBegin, BroadcastEnd, CopyBegin, CopyEnd };

class NcclTimelineRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  explicit NcclTimelineRecorder(bool on) : on_(on) {}
  ~NcclTimelineRecorder() { release(); }
  NcclTimelineRecorder(const NcclTimelineRecorder&) = delete;
  NcclTimelineRecorder& operator=(const NcclTimelineRecorder&) = delete;

  // A new layout of `slices`: their timing events, created where there are fewer than they need.
  tl::expected<void, ChannelFailure> layOut(std::span<const BroadcastSlice> slices);
  // A transfer entered at `entered` is about to enqueue its first GPU work; the last transfer's slices are dropped.
  void begin(Clock::time_point entered);
  // The transfer's origin, recorded on `stream` before its first work.
  cudaError_t markOrigin(cudaStream_t stream);
  cudaError_t mark(std::size_t slice, SliceEvent event, cudaStream_t stream);
  // Slice `slice`'s broadcast call, from `called` to `returned`; `settled`: it returned ncclInProgress and was
  // settled until now.
  void timeCall(std::size_t slice, Clock::time_point called, Clock::time_point returned, bool settled);
  // The host's instants (NcclHostTiming), in the order a transfer passes them.
  void enqueued();
  void doneSeen();
  // The device is done: every slice's events read back into slices().
  tl::expected<void, ChannelFailure> collect();
  // About to return the transfer's result: its host times become hostTiming().
  void returned();

  // The last successful transfer's, with the timeline on; empty (zeroes) without it.
  const std::vector<NcclSliceTiming>& slices() const { return slices_; }
  const NcclHostTiming& hostTiming() const { return hostTiming_; }

  // Destroys the events (State's teardown calls it where the channel's other events go).
  void release();

 private:
  double sinceEntered(Clock::time_point at) const;

  bool on_ = false;
  cudaEvent_t origin_ = nullptr;
  std::vector<cudaEvent_t> events_;      // 4 per slice (SliceEvent)
  std::vector<NcclSliceTiming> layout_;  // per slice: bucket, bytes, direct
  std::vector<double> callMs_;
  std::vector<double> settleMs_;
  Clock::time_point entered_{};
  NcclHostTiming pending_;  // this transfer's, until it returns
  std::vector<NcclSliceTiming> slices_;
  NcclHostTiming hostTiming_;
};

}  // namespace wsync::bus::gpu::detail
