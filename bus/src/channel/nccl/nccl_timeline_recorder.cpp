#include "channel/nccl/nccl_timeline_recorder.hpp"

#include "channel/gpu/cuda_check.hpp"

namespace wsync::bus::gpu::detail {
namespace {

constexpr std::size_t kEventsPerSlice = 4;  // SliceEvent

double millisecondsBetween(NcclTimelineRecorder::Clock::time_point from, NcclTimelineRecorder::Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

tl::expected<void, ChannelFailure> NcclTimelineRecorder::layOut(std::span<const BroadcastSlice> slices) {
  if (!on_) return {};
  if (origin_ == nullptr) {
    if (const cudaError_t error = cudaEventCreate(&origin_); error != cudaSuccess) {
      return tl::unexpected(cudaFailure("cudaEventCreate (timeline)", error));
    }
  }
  while (events_.size() < kEventsPerSlice * slices.size()) {
    cudaEvent_t event = nullptr;
    if (const cudaError_t error = cudaEventCreate(&event); error != cudaSuccess) {
      return tl::unexpected(cudaFailure("cudaEventCreate (timeline)", error));
    }
    events_.push_back(event);
  }
  layout_.clear();
  for (const BroadcastSlice& slice : slices) {
    layout_.push_back(NcclSliceTiming{.bucket = slice.bucket, .bytes = slice.bytes, .direct = slice.direct});
  }
  return {};
}

void NcclTimelineRecorder::begin(Clock::time_point entered) {
  if (!on_) return;
  slices_.clear();
  callMs_.assign(layout_.size(), 0.0);
  settleMs_.assign(layout_.size(), 0.0);
  entered_ = entered;
  pending_ = NcclHostTiming{.enqueueBegin = sinceEntered(Clock::now())};
}

cudaError_t NcclTimelineRecorder::markOrigin(cudaStream_t stream) {
  return on_ ? cudaEventRecord(origin_, stream) : cudaSuccess;
}

cudaError_t NcclTimelineRecorder::mark(std::size_t slice, SliceEvent event, cudaStream_t stream) {
  return on_ ? cudaEventRecord(events_[kEventsPerSlice * slice + static_cast<std::size_t>(event)], stream)
             : cudaSuccess;
}

void NcclTimelineRecorder::timeCall(std::size_t slice, Clock::time_point called, Clock::time_point returned,
                                    bool settled) {
  if (!on_) return;
  callMs_[slice] = millisecondsBetween(called, returned);
  settleMs_[slice] = settled ? millisecondsBetween(returned, Clock::now()) : 0.0;
}

void NcclTimelineRecorder::enqueued() {
  if (on_) pending_.enqueueEnd = sinceEntered(Clock::now());
}

void NcclTimelineRecorder::doneSeen() {
  if (on_) pending_.doneSeen = sinceEntered(Clock::now());
}

tl::expected<void, ChannelFailure> NcclTimelineRecorder::collect() {
  if (!on_) return {};
  auto since = [&](std::size_t slice, SliceEvent event, double& milliseconds) -> cudaError_t {
    float elapsed = 0;
    const cudaError_t error =
        cudaEventElapsedTime(&elapsed, origin_, events_[kEventsPerSlice * slice + static_cast<std::size_t>(event)]);
    milliseconds = elapsed;
    return error;
  };
  for (std::size_t slice = 0; slice < layout_.size(); ++slice) {
    NcclSliceTiming timing = layout_[slice];
    timing.callMs = callMs_[slice];
    timing.settleMs = settleMs_[slice];
    WSYNC_CUDA_TRY(since(slice, SliceEvent::BroadcastBegin, timing.broadcastBegin));
    WSYNC_CUDA_TRY(since(slice, SliceEvent::BroadcastEnd, timing.broadcastEnd));
    WSYNC_CUDA_TRY(since(slice, SliceEvent::CopyBegin, timing.copyBegin));
    WSYNC_CUDA_TRY(since(slice, SliceEvent::CopyEnd, timing.copyEnd));
    slices_.push_back(timing);
  }
  return {};
}

void NcclTimelineRecorder::returned() {
  if (!on_) return;
  pending_.returned = sinceEntered(Clock::now());
  hostTiming_ = pending_;
}

void NcclTimelineRecorder::release() {
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
  events_.clear();
  if (origin_ != nullptr) cudaEventDestroy(origin_);
  origin_ = nullptr;
}

double NcclTimelineRecorder::sinceEntered(Clock::time_point at) const { return millisecondsBetween(entered_, at); }

}  // namespace wsync::bus::gpu::detail
