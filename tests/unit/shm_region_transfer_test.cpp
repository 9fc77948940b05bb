// Region transfers over the shm channel (docs/shm-channel.md, "Region transfers"): sources and receivers as threads
// of one process, each with its own ShmChannel over the rings a real ShmChannelOwner made. Every local byte is the
// checkpoint's, whatever the layout (one whole source as the legacy round, dim-0 shards into TP slices of other cuts,
// column slices, replicas, receivers that take nothing from some source, random layouts) and whatever the bucket
// size; each source's report for a receiver equals that receiver's report for it and a digest computed from the
// checkpoint alone; an abort, a cancel probe, a deadline and a receiver that never comes end every side cleanly,
// naming what they waited for.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "random_host_model.hpp"
#include "region_layouts.hpp"
#include "region_rounds.hpp"
#include "test_environment.hpp"
#include "wsync/bus/channel/shm/region_stream.hpp"
#include "wsync/bus/channel/shm/shm_channel.hpp"
#include "wsync/bus/channel/shm/shm_channel_owner.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using test::absentSide;
using test::Buffers;
using test::constSpansOf;
using test::expectPairsAgree;
using test::expectRoundDelivered;
using test::planOf;
using test::RegionRound;
using test::RoundOptions;
using test::shardedModel;
using test::spansOf;

constexpr auto kTransferTimeout = test::kRegionTransferTimeout;
// How long the timeout tests let a side wait before it must report Timeout.
constexpr auto kShortDeadline = 300ms;
// How long the fault tests let the sides settle into their waits before they abort them.
constexpr auto kSettle = 50ms;

std::vector<ChannelMember> members(const char* prefix, std::size_t count) {
  std::vector<ChannelMember> out;
  for (const std::string& name : test::names(prefix, count)) out.push_back(ChannelMember{name, name, true, "", {}});
  return out;
}

// A coordinator's shm owner, with rings for `sources` sources and `receivers` receivers, and the arena its grants
// name (what the agents open their channels by).
struct Rings {
  std::unique_ptr<ShmChannelOwner> owner;
  std::string arena;
};

Rings ringsFor(const ArenaGeometry& geometry, std::uint32_t sources, std::uint32_t receivers) {
  auto owner = ShmChannelOwner::create(test::uniqueBusName("regions"), geometry);
  EXPECT_TRUE(owner.has_value()) << owner.error().describe();
  if (!owner) return {};
  auto grant = (*owner)->prepareSources(members("trainer", sources), members("worker", receivers));
  EXPECT_TRUE(grant.has_value()) << grant.error();
  if (!grant) return {};
  return Rings{std::move(*owner), grant->segment};
}

// Every source and receiver with its own ShmChannel over the arena's rings.
RegionRound runRound(const std::string& arena, std::uint64_t transfer, const RegionPlan& plan, const Buffers& buffers,
                     const RoundOptions& options = {}) {
  const test::RegionChannelFactory open =
      [&arena](bool, std::uint32_t) -> tl::expected<std::unique_ptr<Channel>, ChannelFailure> {
    auto channel = ShmChannel::open(arena);
    if (!channel) return tl::unexpected(channel.error());
    return std::unique_ptr<Channel>(std::move(*channel));
  };
  return test::runRegionRound(open, transfer, plan, buffers, options);
}

// One source holding the whole model into three whole receivers: the round wsync has always run, through the
// source's ring, next to the legacy round through the bus's arena on the same owner. The same bytes land.
TEST(ShmRegionTransfer, OneWholeSourceIntoWholeReceiversLandsWhatTheLegacyRoundDoes) {
  constexpr std::uint32_t kReceivers = 3;
  const ArenaGeometry geometry{64 * 1024, 2, kReceivers};
  const Rings rings = ringsFor(geometry, 1, kReceivers);
  ASSERT_TRUE(rings.owner);
  const std::string& arena = rings.arena;
  const test::HostModel model = test::makeHostModel(11, 60);

  // The legacy round.
  auto buckets = BucketPlan::build(model.manifest, geometry.bucketBytes, 256);
  ASSERT_TRUE(buckets.has_value());
  ASSERT_GT(buckets->bucketCount(), 4 * geometry.bufferCount) << "the test must make buffers go round";
  std::vector<std::vector<std::vector<std::byte>>> staging(kReceivers, test::stagingFor(model.manifest));
  std::vector<tl::expected<TransferResult, ChannelFailure>> legacy(kReceivers, tl::unexpected(absentSide()));
  {
    std::vector<std::thread> receivers;
    for (std::uint32_t r = 0; r < kReceivers; ++r) {
      receivers.emplace_back([&, r] {
        auto channel = ShmChannel::open(arena);
        ASSERT_TRUE(channel.has_value());
        legacy[r] = (*channel)->receive(1, *buckets, test::views(staging[r]), r, Clock::now() + kTransferTimeout);
      });
    }
    auto channel = ShmChannel::open(arena);
    ASSERT_TRUE(channel.has_value());
    auto sent = (*channel)->send(1, *buckets, test::views(model.tensors), kReceivers, Clock::now() + kTransferTimeout);
    for (std::thread& thread : receivers) thread.join();
    ASSERT_TRUE(sent.has_value()) << sent.error().describe();
  }

  test::expectTheRoundOfOneSendersBytes(
      model, [&arena](const RegionPlan& plan, const Buffers& buffers) { return runRound(arena, 2, plan, buffers); },
      legacy, staging);
}

// Buckets of 4 KiB cut every shard into several (and hold several small segments each); buckets of 1 MiB hold a
// source's whole stream. The pair digests do not depend on it.
TEST(ShmRegionTransfer, Dim0ShardsIntoTensorParallelSlicesOfOtherCuts) {
  for (const std::uint32_t sources : {2U, 4U}) {
    SCOPED_TRACE(std::to_string(sources) + " sources");
    const test::RegionLayout layout = shardedModel(sources);
    auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    // The small receiver takes the norm from source 0 (ties go to the lowest holder) and the bias from the last
    // source: with four sources, two have nothing for it.
    const std::uint32_t small = plan->receiverCount() - 1;
    for (std::uint32_t s = 0; s < sources; ++s) {
      EXPECT_EQ(plan->deliveries(s, small).empty(), s != 0 && s != sources - 1) << "source " << s;
    }
    const Buffers buffers = test::sourceBuffers(layout.manifest, *plan);

    std::vector<RegionTransferResult> reports;
    for (const std::uint64_t bucketBytes : {std::uint64_t{4096}, std::uint64_t{1} << 20}) {
      SCOPED_TRACE("buckets of " + std::to_string(bucketBytes));
      const Rings rings = ringsFor({bucketBytes, 2, 8}, sources, plan->receiverCount());
      ASSERT_TRUE(rings.owner);
      const RegionRound round = runRound(rings.arena, 1, *plan, buffers);
      expectRoundDelivered(layout.manifest, *plan, buffers, round);
      reports.push_back(*round.sent[0]);
    }
    EXPECT_EQ(reports[0], reports[1]);
  }
}

// Replicas: each tensor is read by one of its holders, the bytes spread over them. A tensor alone on three
// replicas for one receiver leaves two sources with nothing to send: they return at once, reporting nothing.
TEST(ShmRegionTransfer, ReplicasSpreadTheirBytesAndASourceWithNothingReturnsAtOnce) {
  std::vector<TensorSpec> tensors;
  for (int t = 0; t < 9; ++t) tensors.push_back({"t" + std::to_string(t), msg::DType::F32, {64, 64}});
  const Manifest manifest = *Manifest::create(tensors);
  const Rings rings = ringsFor({4096, 2, 4}, 3, 2);
  ASSERT_TRUE(rings.owner);
  const std::string& arena = rings.arena;
  {
    auto plan = planOf(manifest, std::vector<SourceHoldings>(3, wholeHoldings(manifest)),
                       {wholeBindings(manifest), wholeBindings(manifest)});
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    for (std::uint32_t s = 0; s < 3; ++s) EXPECT_EQ(plan->bytesRead(s), manifest.totalBytes() / 3) << "source " << s;
    const Buffers buffers = test::sourceBuffers(manifest, *plan);
    const RegionRound round = runRound(arena, 1, *plan, buffers);
    expectRoundDelivered(manifest, *plan, buffers, round);
  }
  {
    const Manifest one = *Manifest::create({{"w", msg::DType::F32, {64, 64}}});
    auto plan = planOf(one, std::vector<SourceHoldings>(3, wholeHoldings(one)), {wholeBindings(one)});
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    EXPECT_TRUE(plan->segmentsOf(1).empty() && plan->segmentsOf(2).empty());
    const Buffers buffers = test::sourceBuffers(one, *plan);
    const RegionRound round = runRound(arena, 2, *plan, buffers);
    expectRoundDelivered(one, *plan, buffers, round);
  }
}

// Random layouts (region_layouts.hpp) with tensors of up to 40^3 elements, one after another through the same rings:
// segments far larger and far smaller than the 4 KiB buckets, 1 to 4 sources, 1 to 3 receivers.
TEST(ShmRegionTransfer, RandomLayoutsDeliverEveryBoundElement) {
  const Rings rings = ringsFor({4096, 2, 4}, 4, 3);
  ASSERT_TRUE(rings.owner);
  const std::string& arena = rings.arena;
  std::mt19937 random(20261203);
  int goneRound = 0;  // trials where some source's ring went round (more buckets than buffers)
  int skipped = 0;    // trials where some receiver of a source skipped some of its buckets
  for (int trial = 0; trial < 100; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const test::RegionLayout layout = test::randomLayout(random, 40);
    auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    bool wentRound = false;
    bool skipping = false;
    for (std::uint32_t s = 0; s < plan->sourceCount(); ++s) {
      auto stream = RegionStream::build(*plan, s, 4096);
      ASSERT_TRUE(stream.has_value());
      wentRound = wentRound || stream->bucketCount() > 2;
      for (std::uint32_t r = 0; r < plan->receiverCount(); ++r) {
        for (std::uint32_t bucket = 0; bucket < stream->bucketCount(); ++bucket) {
          const bool takes = (stream->receiversOf(bucket) >> r & 1U) != 0;
          skipping = skipping || (!takes && !plan->deliveries(s, r).empty());
        }
      }
    }
    goneRound += wentRound ? 1 : 0;
    skipped += skipping ? 1 : 0;
    const Buffers buffers = test::sourceBuffers(layout.manifest, *plan);
    const RegionRound round = runRound(arena, static_cast<std::uint64_t>(trial) + 1, *plan, buffers);
    expectRoundDelivered(layout.manifest, *plan, buffers, round);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(goneRound, 15) << "the layouts must make rings go round";
  EXPECT_GE(skipped, 15) << "the layouts must make receivers skip buckets";
}

// Each bucket of a source's stream is for the receivers of the segments it holds a piece of, and no other.
TEST(ShmRegionTransfer, EachBucketIsForTheReceiversOfItsSegments) {
  const test::RegionLayout layout = shardedModel(2);
  auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
  ASSERT_TRUE(plan.has_value());
  for (std::uint32_t s = 0; s < plan->sourceCount(); ++s) {
    auto stream = RegionStream::build(*plan, s, 4096);
    ASSERT_TRUE(stream.has_value()) << stream.error().describe();
    ASSERT_GT(stream->bucketCount(), 4U);
    std::vector<ReceiverSet> expected(stream->bucketCount(), 0);
    for (std::uint32_t r = 0; r < plan->receiverCount(); ++r) {
      for (const Delivery& delivery : plan->deliveries(s, r)) {
        for (const Piece& piece : stream->buckets().piecesOfTensor(stream->positionOf(delivery.segment))) {
          expected[piece.bucket] |= ReceiverSet{1} << r;
        }
      }
    }
    for (std::uint32_t bucket = 0; bucket < stream->bucketCount(); ++bucket) {
      EXPECT_EQ(stream->receiversOf(bucket), expected[bucket]) << "source " << s << " bucket " << bucket;
    }
  }
}

// Both sides report their bytes after every bucket they handle, rising to what they read or took.
TEST(ShmRegionTransfer, BothSidesReportProgress) {
  const test::RegionLayout layout = shardedModel(2);
  auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
  ASSERT_TRUE(plan.has_value());
  const Rings rings = ringsFor({4096, 2, 8}, 2, plan->receiverCount());
  ASSERT_TRUE(rings.owner);
  const Buffers buffers = test::sourceBuffers(layout.manifest, *plan);
  std::vector<std::vector<std::uint64_t>> sourceReports(plan->sourceCount());
  std::vector<std::vector<std::uint64_t>> receiverReports(plan->receiverCount());
  RoundOptions options;
  options.setUp = [&](Channel& channel, bool source, std::uint32_t index) {
    auto& reports = source ? sourceReports[index] : receiverReports[index];
    channel.setProgress([&reports](std::uint64_t bytes) { reports.push_back(bytes); });
  };
  const RegionRound round = runRound(rings.arena, 1, *plan, buffers, options);
  expectRoundDelivered(layout.manifest, *plan, buffers, round);
  for (std::uint32_t s = 0; s < plan->sourceCount(); ++s) {
    ASSERT_FALSE(sourceReports[s].empty());
    EXPECT_TRUE(std::is_sorted(sourceReports[s].begin(), sourceReports[s].end()));
    EXPECT_EQ(sourceReports[s].back(), plan->bytesRead(s)) << "source " << s;
  }
  for (std::uint32_t r = 0; r < plan->receiverCount(); ++r) {
    ASSERT_FALSE(receiverReports[r].empty());
    EXPECT_TRUE(std::is_sorted(receiverReports[r].begin(), receiverReports[r].end()));
    EXPECT_EQ(receiverReports[r].back(), plan->bytesReceived(r)) << "receiver " << r;
  }
}

// Two sources of 512 KiB each into two whole receivers, through rings of two 4 KiB buckets; receiver 1 stalls after
// its first bucket, so every side is mid-transfer, waiting, when the round ends.
struct StalledRound {
  test::RegionLayout layout{*Manifest::create({{"w", msg::DType::F32, {1024, 256}}}), {}, {}};
  StalledRound() {
    layout.sources = {{{HeldRegion{0, Box{{0, 0}, {512, 256}}}}}, {{HeldRegion{0, Box{{512, 0}, {512, 256}}}}}};
    layout.receivers = {wholeBindings(layout.manifest), wholeBindings(layout.manifest)};
  }
};

void expectEverySideAborted(bool byOwner) {
  StalledRound stalled;
  auto plan = planOf(stalled.layout.manifest, stalled.layout.sources, stalled.layout.receivers);
  ASSERT_TRUE(plan.has_value());
  const Rings rings = ringsFor({4096, 2, 2}, 2, 2);
  ASSERT_TRUE(rings.owner);
  const Buffers buffers = test::sourceBuffers(stalled.layout.manifest, *plan);
  std::atomic<bool> stalledOnce{false};
  std::atomic<bool> ended{false};
  RoundOptions options;
  options.setUp = [&](Channel& channel, bool source, std::uint32_t index) {
    if (!byOwner) channel.setCancelProbe([&] { return ended.load(); });
    if (source || index != 1) return;
    channel.setProgress([&](std::uint64_t) {
      stalledOnce.store(true);
      while (!ended.load()) std::this_thread::sleep_for(1ms);
    });
  };
  const auto start = Clock::now();
  RegionRound round;
  std::thread running([&] { round = runRound(rings.arena, 5, *plan, buffers, options); });
  while (!stalledOnce.load()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(kSettle);
  if (byOwner) rings.owner->abort(5, true);
  ended.store(true);
  running.join();
  for (std::uint32_t s = 0; s < 2; ++s) {
    ASSERT_FALSE(round.sent[s].has_value()) << "source " << s;
    EXPECT_EQ(round.sent[s].error().code, ChannelError::Aborted) << round.sent[s].error().describe();
    EXPECT_NE(round.sent[s].error().detail.find("source " + std::to_string(s)), std::string::npos)
        << round.sent[s].error().detail;
  }
  for (std::uint32_t r = 0; r < 2; ++r) {
    ASSERT_FALSE(round.received[r].has_value()) << "receiver " << r;
    EXPECT_EQ(round.received[r].error().code, ChannelError::Aborted) << round.received[r].error().describe();
    EXPECT_NE(round.received[r].error().detail.find("receiver " + std::to_string(r)), std::string::npos)
        << round.received[r].error().detail;
  }
  EXPECT_LT(Clock::now() - start, kTransferTimeout / 2);
}

TEST(ShmRegionTransfer, AnOwnersAbortMidTransferEndsEverySide) { expectEverySideAborted(true); }

// Nobody left to set the abort words (the coordinator died): the agents' cancel probe ends every side.
TEST(ShmRegionTransfer, ACancelProbeMidTransferEndsEverySide) { expectEverySideAborted(false); }

// A receiver whose source never starts gives up at its deadline, naming the source and the bucket it waited for.
TEST(ShmRegionTransfer, ADeadlineNamesWhatTheReceiverWaitedFor) {
  StalledRound stalled;
  auto plan = planOf(stalled.layout.manifest, stalled.layout.sources, stalled.layout.receivers);
  ASSERT_TRUE(plan.has_value());
  const Rings rings = ringsFor({4096, 2, 2}, 2, 2);
  ASSERT_TRUE(rings.owner);
  RoundOptions options;
  options.absentSources = {0, 1};
  options.absentReceivers = {1};
  options.timeout = kShortDeadline;
  const RegionRound round =
      runRound(rings.arena, 3, *plan, test::sourceBuffers(stalled.layout.manifest, *plan), options);
  ASSERT_FALSE(round.received[0].has_value());
  EXPECT_EQ(round.received[0].error().code, ChannelError::Timeout);
  EXPECT_EQ(round.received[0].error().detail,
            "receiver 0 taking from source 0: timed out while waiting for the sender to fill bucket 0");
}

// A receiver that never comes: the source sends what fits in its ring, then gives up at its deadline naming it,
// even when the stream is short enough that only the final wait (every receiver drained) is left; the receiver that
// came has everything.
TEST(ShmRegionTransfer, AReceiverThatNeverComesTimesTheSourceOutNamingIt) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::F32, {16, 16}}});
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest), wholeBindings(manifest)});
  ASSERT_TRUE(plan.has_value());
  const Rings rings = ringsFor({4096, 2, 2}, 1, 2);
  ASSERT_TRUE(rings.owner);
  const Buffers buffers = test::sourceBuffers(manifest, *plan);
  RoundOptions options;
  options.absentReceivers = {1};
  options.timeout = kShortDeadline;
  const RegionRound round = runRound(rings.arena, 4, *plan, buffers, options);
  ASSERT_FALSE(round.sent[0].has_value());
  EXPECT_EQ(round.sent[0].error().code, ChannelError::Timeout);
  EXPECT_EQ(round.sent[0].error().detail, "source 0: timed out while waiting for receiver 1 to drain bucket 0");
  ASSERT_TRUE(round.received[0].has_value()) << round.received[0].error().describe();
  test::expectBoundElements(manifest, plan->bindings(0), round.locals[0], "receiver 0");

  // A longer stream: the source stops at the ring's end, its first refill waiting for the absent receiver.
  StalledRound stalled;
  auto longPlan = planOf(stalled.layout.manifest, stalled.layout.sources, stalled.layout.receivers);
  ASSERT_TRUE(longPlan.has_value());
  const Rings longRings = ringsFor({4096, 2, 2}, 2, 2);
  ASSERT_TRUE(longRings.owner);
  options.absentSources = {1};
  const RegionRound stuck =
      runRound(longRings.arena, 4, *longPlan, test::sourceBuffers(stalled.layout.manifest, *longPlan), options);
  ASSERT_FALSE(stuck.sent[0].has_value());
  EXPECT_EQ(stuck.sent[0].error().detail, "source 0: timed out while waiting for receiver 1 to drain bucket 0");
}

// Buffers that do not fit the plan are refused before any byte moves or any wait begins.
TEST(ShmRegionTransfer, BuffersThatDoNotFitThePlanMoveNothing) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::F32, {16, 16}}, {"v", msg::DType::U8, {9}}});
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest)});
  ASSERT_TRUE(plan.has_value());
  const Rings rings = ringsFor({4096, 2, 1}, 1, 1);
  ASSERT_TRUE(rings.owner);
  auto channel = ShmChannel::open(rings.arena);
  ASSERT_TRUE(channel.has_value());
  EXPECT_TRUE((*channel)->carriesRegions());

  Buffers buffers = test::sourceBuffers(manifest, *plan);
  buffers[0][0].resize(100);
  auto sent = (*channel)->sendRegions(1, *plan, 0, constSpansOf(buffers[0]), Clock::now() + kTransferTimeout);
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::PlanMismatch) << sent.error().describe();
  buffers[0].pop_back();
  sent = (*channel)->sendRegions(1, *plan, 0, constSpansOf(buffers[0]), Clock::now() + kTransferTimeout);
  EXPECT_EQ(sent.error().code, ChannelError::PlanMismatch) << sent.error().describe();

  auto locals = test::localsOf(plan->bindings(0));
  locals[1].resize(8);
  auto received = (*channel)->receiveRegions(1, *plan, 0, spansOf<std::byte>(locals), Clock::now() + kTransferTimeout);
  ASSERT_FALSE(received.has_value());
  EXPECT_EQ(received.error().code, ChannelError::PlanMismatch);
  EXPECT_NE(received.error().detail.find("local tensor 'v' needs 9 bytes"), std::string::npos)
      << received.error().detail;
  EXPECT_EQ((*channel)->receiveRegions(1, *plan, 1, spansOf<std::byte>(locals), Clock::now()).error().code,
            ChannelError::PlanMismatch);
}

// The owner makes one ring a source, of the arena's geometry, keeps them across rounds, refuses more sources than
// it has rings for, and removes them with itself; a round of one sender keeps the bus's arena.
TEST(ShmRegionTransfer, TheOwnerMakesARingASourceAndRemovesThem) {
  const ArenaGeometry geometry{8192, 3, 4};
  std::string arena;
  {
    auto owner = ShmChannelOwner::create(test::uniqueBusName("rings"), geometry);
    ASSERT_TRUE(owner.has_value()) << owner.error().describe();
    auto legacy = (*owner)->prepare(ChannelMember{}, members("worker", 2));
    ASSERT_TRUE(legacy.has_value());
    arena = legacy->segment;
    EXPECT_EQ((*owner)->ringCount(), 0U);
    auto grant = (*owner)->prepareSources(members("trainer", 3), members("worker", 2));
    ASSERT_TRUE(grant.has_value()) << grant.error();
    EXPECT_EQ(grant->segment, arena);
    EXPECT_EQ((*owner)->ringCount(), 3U);
    for (std::uint32_t s = 0; s < 3; ++s) {
      auto ring = ShmArena::open(sourceArenaName(arena, s));
      ASSERT_TRUE(ring.has_value()) << ring.error().describe();
      EXPECT_EQ(ring->geometry(), geometry);
    }
    ASSERT_TRUE((*owner)->prepareSources(members("trainer", 2), members("worker", 2)).has_value());
    EXPECT_EQ((*owner)->ringCount(), 3U) << "rings are kept across rounds";

    auto tooMany = (*owner)->prepareSources(members("trainer", kMaxRegionSources + 1), members("worker", 1));
    ASSERT_FALSE(tooMany.has_value());
    EXPECT_EQ(tooMany.error(), "65 sources exceed the shm channel's 64 (one ring each)");
    auto tooManyReceivers = (*owner)->prepareSources(members("trainer", 1), members("worker", 5));
    ASSERT_FALSE(tooManyReceivers.has_value());
    EXPECT_EQ(tooManyReceivers.error(), "5 workers exceed the shm arena's 4 receivers");
  }
  for (std::uint32_t s = 0; s < 3; ++s) {
    EXPECT_EQ(ShmArena::open(sourceArenaName(arena, s)).error().code, ChannelError::NoArena) << "ring " << s;
  }
}

}  // namespace
}  // namespace wsync::bus
