#include "wsync/bus/channel/nccl/nccl_timeline.hpp"

#include <algorithm>

namespace wsync::bus {

NcclTimelineSummary summarizeTimeline(std::span<const NcclSliceTiming> slices) {
  NcclTimelineSummary summary;
  summary.slices = slices.size();
  if (slices.empty()) return summary;
  double firstBroadcast = slices.front().broadcastBegin;
  double lastBroadcast = slices.front().broadcastEnd;
  double lastCopy = slices.front().copyEnd;
  for (const NcclSliceTiming& slice : slices) {
    summary.broadcastBusy += slice.broadcastEnd - slice.broadcastBegin;
    summary.copyBusy += slice.copyEnd - slice.copyBegin;
    firstBroadcast = std::min(firstBroadcast, slice.broadcastBegin);
    lastBroadcast = std::max(lastBroadcast, slice.broadcastEnd);
    lastCopy = std::max(lastCopy, slice.copyEnd);
  }
  // Both streams' intervals are in order and disjoint within their stream: one sweep finds their intersection.
  std::size_t broadcast = 0;
  std::size_t copy = 0;
  while (broadcast < slices.size() && copy < slices.size()) {
    const NcclSliceTiming& b = slices[broadcast];
    const NcclSliceTiming& c = slices[copy];
    const double from = std::max(b.broadcastBegin, c.copyBegin);
    const double to = std::min(b.broadcastEnd, c.copyEnd);
    if (to > from) summary.copyBesideBroadcast += to - from;
    if (b.broadcastEnd < c.copyEnd) {
      ++broadcast;
    } else {
      ++copy;
    }
  }
  summary.broadcastSpan = lastBroadcast - firstBroadcast;
  summary.broadcastGaps = std::max(0.0, summary.broadcastSpan - summary.broadcastBusy);
  summary.head = std::max(0.0, firstBroadcast);
  summary.tail = std::max(0.0, lastCopy - lastBroadcast);
  summary.total = std::max(lastBroadcast, lastCopy);
  return summary;
}

}  // namespace wsync::bus
