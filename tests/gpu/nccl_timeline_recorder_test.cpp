// The nccl channel's timeline recorder (bus/src/channel/nccl/nccl_timeline_recorder.hpp) on its own. Off, it is
// nothing: every call succeeds without touching CUDA (so it runs on a machine without a GPU), and the channel's
// timeline() and hostTiming() stay empty. On, it brackets each slice with events on a stream, reads them back in
// the order NcclSliceTiming names them, and keeps the host's instants in the order a transfer passes them.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "channel/nccl/nccl_timeline_recorder.hpp"
#include "gpu_peers.hpp"

namespace wsync::test {
namespace {

using bus::BroadcastSlice;
using bus::gpu::detail::NcclTimelineRecorder;
using bus::gpu::detail::SliceEvent;
using Clock = NcclTimelineRecorder::Clock;

const std::vector<BroadcastSlice> kSlices{
    BroadcastSlice{.bucket = 0, .offset = 0, .bytes = 4096, .direct = false},
    BroadcastSlice{.bucket = 1, .offset = 0, .bytes = 8192, .direct = true},
};

// Every step of a transfer, as NcclChannel::run takes them, on `stream`.
void recordTransfer(NcclTimelineRecorder& recorder, cudaStream_t stream) {
  ASSERT_TRUE(recorder.layOut(kSlices).has_value());
  recorder.begin(Clock::now());
  ASSERT_EQ(recorder.markOrigin(stream), cudaSuccess);
  for (std::size_t slice = 0; slice < kSlices.size(); ++slice) {
    ASSERT_EQ(recorder.mark(slice, SliceEvent::CopyBegin, stream), cudaSuccess);
    ASSERT_EQ(recorder.mark(slice, SliceEvent::CopyEnd, stream), cudaSuccess);
    ASSERT_EQ(recorder.mark(slice, SliceEvent::BroadcastBegin, stream), cudaSuccess);
    const auto called = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    recorder.timeCall(slice, called, Clock::now(), /*settled=*/slice == 1);
    ASSERT_EQ(recorder.mark(slice, SliceEvent::BroadcastEnd, stream), cudaSuccess);
  }
  recorder.enqueued();
  if (stream != nullptr) {
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  recorder.doneSeen();
  ASSERT_TRUE(recorder.collect().has_value());
  recorder.returned();
}

TEST(NcclTimelineRecorder, OffRecordsNothingAndTouchesNoDevice) {
  NcclTimelineRecorder recorder(false);
  // No stream: a recorder that is off must not pass it to CUDA.
  ASSERT_NO_FATAL_FAILURE(recordTransfer(recorder, nullptr));
  EXPECT_TRUE(recorder.slices().empty());
  EXPECT_EQ(recorder.hostTiming().enqueueBegin, 0);
  EXPECT_EQ(recorder.hostTiming().returned, 0);
}

TEST(NcclTimelineRecorder, OnTimesEverySliceInOrder) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  NcclTimelineRecorder recorder(true);
  ASSERT_NO_FATAL_FAILURE(recordTransfer(recorder, stream));
  ASSERT_EQ(recorder.slices().size(), kSlices.size());
  for (std::size_t slice = 0; slice < kSlices.size(); ++slice) {
    const bus::NcclSliceTiming& timing = recorder.slices()[slice];
    EXPECT_EQ(timing.bucket, kSlices[slice].bucket);
    EXPECT_EQ(timing.bytes, kSlices[slice].bytes);
    EXPECT_EQ(timing.direct, kSlices[slice].direct);
    EXPECT_LE(timing.copyBegin, timing.copyEnd);
    EXPECT_LE(timing.copyEnd, timing.broadcastBegin);
    EXPECT_LE(timing.broadcastBegin, timing.broadcastEnd);
    EXPECT_GT(timing.callMs, 0);
    EXPECT_EQ(timing.settleMs > 0, slice == 1) << "only a call that returned ncclInProgress settles";
  }
  const bus::NcclHostTiming& host = recorder.hostTiming();
  EXPECT_LE(host.enqueueBegin, host.enqueueEnd);
  EXPECT_LE(host.enqueueEnd, host.doneSeen);
  EXPECT_LE(host.doneSeen, host.returned);
  // The next transfer starts empty: a failed one leaves no slices of the last.
  recorder.begin(Clock::now());
  EXPECT_TRUE(recorder.slices().empty());
  recorder.release();
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace wsync::test
