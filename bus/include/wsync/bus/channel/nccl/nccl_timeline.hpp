#pragma once
// Where an nccl transfer's time went on one rank: CUDA timing events around each broadcast and each pack/unpack
// launch, recorded only when NcclChannelConfig::timeline is set (`wsync-bench gpu --timeline`; docs/gpu-channels.md,
// "Timeline"). A kernel profiler times kernels one by one: this is the timeline, per rank and per slice, of the
// streams the channel itself runs.
#include <cstdint>
#include <span>

namespace wsync::bus {

// One broadcast slice (broadcast_slices.hpp) on one rank. Times in milliseconds from an event recorded as the
// transfer's first work was enqueued; a begin is when the stream reached the work (after the waits before it).
struct NcclSliceTiming {
  std::uint32_t bucket = 0;
  std::uint64_t bytes = 0;
  bool direct = false;  // broadcast between the tensors; the "copy" is the checksum alone
  double broadcastBegin = 0;
  double broadcastEnd = 0;
  double copyBegin = 0;  // the sender's pack before the broadcast, a receiver's unpack after it
  double copyEnd = 0;
  // Host time of the broadcast's call, and of its settling after the call returned ncclInProgress (0 when it returned
  // ncclSuccess). Not GPU intervals: a begin event is recorded before the call, so a slow call shows as a broadcast
  // that took longer. On a non-blocking communicator every broadcast returns ncclInProgress (NCCL launches it from a
  // thread of its own), and the first broadcast of a transfer waits that out.
  double callMs = 0;
  double settleMs = 0;
};

// The host's side of one transfer on one rank, in milliseconds from the send or receive call: what the GPU's timeline
// cannot show (the time before its first work, and after its last).
struct NcclHostTiming {
  double enqueueBegin = 0;  // the layout checked: the first GPU work (the slices' time origin) about to be enqueued
  double enqueueEnd = 0;    // every slice enqueued
  double doneSeen = 0;      // the watchdog saw every stream's work finished
  double returned = 0;      // the digest finished, about to return
};

// A rank's transfer in a few figures (milliseconds), for comparing the channel's broadcasts with a raw one.
struct NcclTimelineSummary {
  double broadcastBusy = 0;        // the broadcasts' own durations, summed
  double broadcastSpan = 0;        // the first broadcast's begin to the last one's end
  double broadcastGaps = 0;        // span - busy: the communication stream waited (for a pack, or for a buffer to free)
  double copyBusy = 0;             // the packs or unpacks, summed
  double copyBesideBroadcast = 0;  // of which ran while a broadcast did (both streams busy)
  double head = 0;                 // the start to the first broadcast's begin (the sender's first pack)
  double tail = 0;                 // the last broadcast's end to the last copy's end (a receiver's last unpack)
  double total = 0;                // the start to the last end of either stream
  std::uint64_t slices = 0;
};

// Intervals of one stream do not overlap each other (a stream runs its work in order); the slices come in order.
NcclTimelineSummary summarizeTimeline(std::span<const NcclSliceTiming> slices);

}  // namespace wsync::bus
