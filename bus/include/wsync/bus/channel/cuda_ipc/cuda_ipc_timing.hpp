#pragma once
// Where a cuda_ipc round's time goes outside the copy kernel (docs/gpu-channels.md, "Round timing"): the instants each
// side passes, on the host's monotonic clock (one clock for every process of the host, so a sender's and a receiver's
// instants compare), and the copy's GPU time when asked for.
// Read back after each send or receive (CudaIpcChannel::lastTiming); `wsync-bench gpu --timeline` reports them.
#include <cstdint>

namespace wsync::bus {

// steady_clock nanoseconds; 0 where the round did not get that far, or the field is the other side's.
struct IpcRoundTiming {
  // Sender
  std::int64_t sendCalled = 0;
  std::int64_t exportChecked = 0;  // the span digest (and the export, when it changed) done
  std::int64_t published = 0;      // the transfer's number published, receivers woken
  std::int64_t allCopied = 0;      // every receiver's done seen
  // Receiver
  std::int64_t receiveCalled = 0;
  std::int64_t sawPublished = 0;  // woke and saw the transfer's number
  std::int64_t launched = 0;      // tables read, the copy enqueued
  std::int64_t copied = 0;        // its event seen complete
  std::int64_t reported = 0;      // digest written, done published, the sender woken
  // Receiver, with CudaIpcChannel::setTimeline(true): the copy kernel between CUDA events (ms); else 0.
  double copyGpuMs = 0;
};

}  // namespace wsync::bus
