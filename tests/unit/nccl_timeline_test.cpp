// The summary of an nccl transfer's timeline on one rank (wsync-bench gpu --nccl-timeline): busy time, the waits
// between broadcasts, the copies that ran beside a broadcast, the sender's head and a receiver's tail.
#include <gtest/gtest.h>

#include <vector>

#include "wsync/bus/channel/nccl/nccl_timeline.hpp"

namespace wsync::bus {
namespace {

NcclSliceTiming slice(double broadcastBegin, double broadcastEnd, double copyBegin, double copyEnd) {
  return {.bucket = 0,
          .bytes = 1,
          .direct = false,
          .broadcastBegin = broadcastBegin,
          .broadcastEnd = broadcastEnd,
          .copyBegin = copyBegin,
          .copyEnd = copyEnd};
}

TEST(NcclTimeline, NothingToSummarizeIsAllZero) {
  const NcclTimelineSummary summary = summarizeTimeline({});
  EXPECT_EQ(summary.slices, 0U);
  EXPECT_EQ(summary.total, 0);
  EXPECT_EQ(summary.broadcastBusy, 0);
}

// A sender: each slice packed, then broadcast while the next one is packed; the comm stream waits for the 2nd pack.
TEST(NcclTimeline, ASendersPacksBeforeAndBesideItsBroadcasts) {
  const std::vector<NcclSliceTiming> slices{slice(1, 3, 0, 1), slice(4, 6, 1, 4), slice(6, 8, 4, 5)};
  const NcclTimelineSummary summary = summarizeTimeline(slices);
  EXPECT_EQ(summary.slices, 3U);
  EXPECT_DOUBLE_EQ(summary.head, 1);           // the first pack
  EXPECT_DOUBLE_EQ(summary.broadcastBusy, 6);  // 2 + 2 + 2
  EXPECT_DOUBLE_EQ(summary.broadcastSpan, 7);  // 1 .. 8
  EXPECT_DOUBLE_EQ(summary.broadcastGaps, 1);  // 3 .. 4, waiting for the second pack
  EXPECT_DOUBLE_EQ(summary.copyBusy, 5);       // 1 + 3 + 1
  // Pack 2 (1..4) beside broadcast 1 (1..3): 2; pack 3 (4..5) beside broadcast 2 (4..6): 1.
  EXPECT_DOUBLE_EQ(summary.copyBesideBroadcast, 3);
  EXPECT_DOUBLE_EQ(summary.tail, 0);
  EXPECT_DOUBLE_EQ(summary.total, 8);
}

// A receiver: each slice unpacked after its broadcast, beside the next broadcast; the last unpack is the tail.
TEST(NcclTimeline, AReceiversLastUnpackIsItsTail) {
  const std::vector<NcclSliceTiming> slices{slice(0.5, 2, 2, 3.5), slice(2, 4, 4, 4.5), slice(4, 5, 5, 5.25)};
  const NcclTimelineSummary summary = summarizeTimeline(slices);
  EXPECT_DOUBLE_EQ(summary.head, 0.5);
  EXPECT_DOUBLE_EQ(summary.broadcastBusy, 4.5);
  EXPECT_DOUBLE_EQ(summary.broadcastGaps, 0);
  EXPECT_DOUBLE_EQ(summary.copyBusy, 2.25);
  // Unpack 1 (2..3.5) beside broadcast 2 (2..4): 1.5; unpack 2 (4..4.5) beside broadcast 3 (4..5): 0.5.
  EXPECT_DOUBLE_EQ(summary.copyBesideBroadcast, 2);
  EXPECT_DOUBLE_EQ(summary.tail, 0.25);
  EXPECT_DOUBLE_EQ(summary.total, 5.25);
}

// A copy that spans several broadcasts counts beside each of them.
TEST(NcclTimeline, OneLongCopyBesideSeveralBroadcasts) {
  const std::vector<NcclSliceTiming> slices{slice(0, 1, 0, 10), slice(2, 3, 10, 11), slice(4, 5, 11, 12)};
  const NcclTimelineSummary summary = summarizeTimeline(slices);
  EXPECT_DOUBLE_EQ(summary.copyBesideBroadcast, 3);
  EXPECT_DOUBLE_EQ(summary.broadcastGaps, 2);
  EXPECT_DOUBLE_EQ(summary.tail, 7);
}

}  // namespace
}  // namespace wsync::bus
