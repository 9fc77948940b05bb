// Region transfers over the tcp channel (docs/tcp-channel.md, "Region rounds"): sources and receivers as threads of
// one process, each source with its own listener on the loopback and each receiver with every source's contact, as
// a region round's grants give them. Every local byte is the checkpoint's, whatever the layout (one whole source as
// the round of one sender, dim-0 shards into TP slices of other cuts, replicas, receivers that take nothing from
// some source, random layouts); each source's report for a receiver equals that receiver's report for it and a digest
// computed from the checkpoint alone, as on the shm channel. A side that dies, is cancelled, never comes or asks the
// wrong source ends every side it reaches, naming what went wrong.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "random_host_model.hpp"
#include "region_layouts.hpp"
#include "region_rounds.hpp"
#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/channel/tcp/tcp_listener.hpp"

namespace wsync::bus {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using test::Buffers;
using test::constSpansOf;
using test::expectPairsAgree;
using test::expectRoundDelivered;
using test::planOf;
using test::RegionRound;
using test::RoundOptions;
using test::shardedModel;
using test::spansOf;

// How long the timeout tests let a side wait before it must report Timeout: the receiver's reconnects and the
// source's admission both fit in it many times over.
constexpr auto kShortDeadline = 500ms;
// How long the fault tests let the sides settle into their waits before they end them.
constexpr auto kSettle = 50ms;
// A receiver's wait after a source closed its connection (kTcpSenderGoneGrace in a real round), shortened so that
// the fault tests end soon.
constexpr auto kShortSenderGoneGrace = 100ms;

// Every source's listener and contact, and the round's token: what a region round's grants give the agents.
struct TcpSources {
  std::vector<std::shared_ptr<TcpListener>> listeners;
  std::vector<std::string> contacts;
  std::vector<std::uint8_t> token;
};

TcpSources sourcesFor(std::uint32_t count, std::uint8_t seed = 1) {
  TcpSources sources;
  for (std::uint32_t s = 0; s < count; ++s) {
    auto listener = TcpListener::open("127.0.0.1");
    EXPECT_TRUE(listener.has_value()) << listener.error().describe();
    if (!listener) return {};
    sources.contacts.push_back((*listener)->contact());
    sources.listeners.push_back(std::move(*listener));
  }
  for (std::size_t i = 0; i < kTcpTokenBytes; ++i) sources.token.push_back(static_cast<std::uint8_t>(seed * 17 + i));
  return sources;
}

tl::expected<std::unique_ptr<Channel>, ChannelFailure> opened(TcpChannelConfig config) {
  auto channel = TcpChannel::open(std::move(config));
  if (!channel) return tl::unexpected(channel.error());
  return std::unique_ptr<Channel>(std::move(*channel));
}

// A source's channel listens on its own listener; a receiver's knows every source's contact (`contacts`, when the
// test gives it other ones).
test::RegionChannelFactory factoryOf(const TcpSources& sources, std::vector<std::string> contacts = {},
                                     std::chrono::milliseconds senderGoneGrace = kTcpSenderGoneGrace) {
  if (contacts.empty()) contacts = sources.contacts;
  return [&sources, contacts, senderGoneGrace](bool source, std::uint32_t index) {
    TcpChannelConfig config;
    config.token = sources.token;
    config.senderGoneGrace = senderGoneGrace;
    if (source) {
      config.listener = sources.listeners[index];
      config.senderContact = sources.contacts[index];
      config.agentId = "t" + std::to_string(index);
    } else {
      config.sourceContacts = contacts;
      config.agentId = "w" + std::to_string(index);
    }
    return opened(std::move(config));
  };
}

RegionRound runRound(const TcpSources& sources, std::uint64_t transfer, const RegionPlan& plan, const Buffers& buffers,
                     const RoundOptions& options = {}) {
  return test::runRegionRound(factoryOf(sources), transfer, plan, buffers, options);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One source holding the whole model into three whole receivers: the round of one sender as a region round, next to
// that round itself on the same listener. The same bytes land.
TEST(TcpRegionTransfer, OneWholeSourceIntoWholeReceiversLandsWhatTheRoundOfOneSenderDoes) {
  constexpr std::uint32_t kReceivers = 3;
  const TcpSources sources = sourcesFor(1);
  ASSERT_EQ(sources.listeners.size(), 1U);
  const test::HostModel model = test::makeHostModel(11, 60);

  auto buckets = BucketPlan::build(model.manifest, 64 * 1024, 256);
  ASSERT_TRUE(buckets.has_value());
  std::vector<std::vector<std::vector<std::byte>>> staging(kReceivers, test::stagingFor(model.manifest));
  std::vector<tl::expected<TransferResult, ChannelFailure>> legacy(kReceivers, tl::unexpected(test::absentSide()));
  {
    std::vector<std::thread> receivers;
    for (std::uint32_t r = 0; r < kReceivers; ++r) {
      receivers.emplace_back([&, r] {
        auto channel = TcpChannel::open({nullptr, sources.contacts[0], sources.token});
        ASSERT_TRUE(channel.has_value()) << channel.error().describe();
        legacy[r] =
            (*channel)->receive(1, *buckets, test::views(staging[r]), r, Clock::now() + test::kRegionTransferTimeout);
      });
    }
    auto channel = TcpChannel::open({sources.listeners[0], sources.contacts[0], sources.token});
    ASSERT_TRUE(channel.has_value());
    auto sent = (*channel)->send(1, *buckets, test::views(model.tensors), kReceivers,
                                 Clock::now() + test::kRegionTransferTimeout);
    for (std::thread& thread : receivers) thread.join();
    ASSERT_TRUE(sent.has_value()) << sent.error().describe();
  }

  test::expectTheRoundOfOneSendersBytes(
      model, [&sources](const RegionPlan& plan, const Buffers& buffers) { return runRound(sources, 2, plan, buffers); },
      legacy, staging);
}

// FSDP2's dim-0 shards over 2 and 4 sources into three TP slices of other cuts, a whole receiver with a fused local
// tensor, and a receiver that takes nothing from most sources (it never connects to them).
TEST(TcpRegionTransfer, Dim0ShardsIntoTensorParallelSlicesOfOtherCuts) {
  for (const std::uint32_t count : {2U, 4U}) {
    SCOPED_TRACE(std::to_string(count) + " sources");
    const test::RegionLayout layout = shardedModel(count);
    auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    const std::uint32_t small = plan->receiverCount() - 1;
    for (std::uint32_t s = 0; s < count; ++s) {
      EXPECT_EQ(plan->deliveries(s, small).empty(), s != 0 && s != count - 1) << "source " << s;
    }
    const TcpSources sources = sourcesFor(count);
    const Buffers buffers = test::sourceBuffers(layout.manifest, *plan);
    expectRoundDelivered(layout.manifest, *plan, buffers, runRound(sources, 1, *plan, buffers));
    // The same listeners take the next round, as an agent's do.
    expectRoundDelivered(layout.manifest, *plan, buffers, runRound(sources, 2, *plan, buffers));
  }
}

// Replicas spread their bytes; a source with nothing for anyone returns at once, and nobody connects to it.
TEST(TcpRegionTransfer, ReplicasSpreadTheirBytesAndASourceWithNothingReturnsAtOnce) {
  std::vector<TensorSpec> tensors;
  for (int t = 0; t < 9; ++t) tensors.push_back({"t" + std::to_string(t), msg::DType::F32, {64, 64}});
  const Manifest manifest = *Manifest::create(tensors);
  const TcpSources sources = sourcesFor(3);
  {
    auto plan = planOf(manifest, std::vector<SourceHoldings>(3, wholeHoldings(manifest)),
                       {wholeBindings(manifest), wholeBindings(manifest)});
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    const Buffers buffers = test::sourceBuffers(manifest, *plan);
    expectRoundDelivered(manifest, *plan, buffers, runRound(sources, 1, *plan, buffers));
  }
  {
    const Manifest one = *Manifest::create({{"w", msg::DType::F32, {64, 64}}});
    auto plan = planOf(one, std::vector<SourceHoldings>(3, wholeHoldings(one)), {wholeBindings(one)});
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    ASSERT_TRUE(plan->segmentsOf(1).empty() && plan->segmentsOf(2).empty());
    const Buffers buffers = test::sourceBuffers(one, *plan);
    const RegionRound round = runRound(sources, 2, *plan, buffers);
    expectRoundDelivered(one, *plan, buffers, round);
  }
}

// Random layouts (region_layouts.hpp): segments of one element to whole tensors, 1 to 4 sources, 1 to 3 receivers,
// one round after another on the same listeners.
TEST(TcpRegionTransfer, RandomLayoutsDeliverEveryBoundElement) {
  const TcpSources sources = sourcesFor(4);
  std::mt19937 random(20261203);
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const test::RegionLayout layout = test::randomLayout(random, 40);
    auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
    ASSERT_TRUE(plan.has_value()) << plan.error().describe();
    const Buffers buffers = test::sourceBuffers(layout.manifest, *plan);
    const RegionRound round = runRound(sources, static_cast<std::uint64_t>(trial) + 1, *plan, buffers);
    expectRoundDelivered(layout.manifest, *plan, buffers, round);
    if (HasFatalFailure()) return;
  }
}

// Two sources of 32 MiB each, dim-0 shards of four 16 MiB tensors, into one whole receiver: large enough that both
// sides report progress mid-transfer (every kRegionProgressBytes), so a test can act there.
struct LargeRound {
  test::RegionLayout layout;
  tl::expected<RegionPlan, RegionFailure> plan;
  Buffers buffers;

  LargeRound() : layout(makeLayout()), plan(planOf(layout.manifest, layout.sources, layout.receivers)) {
    if (plan) buffers = test::sourceBuffers(layout.manifest, *plan);
  }
  static test::RegionLayout makeLayout() {
    std::vector<TensorSpec> tensors;
    for (int t = 0; t < 4; ++t) tensors.push_back({"w" + std::to_string(t), msg::DType::F32, {1024, 4096}});
    test::RegionLayout layout{*Manifest::create(tensors), std::vector<SourceHoldings>(2), {}};
    for (std::uint32_t t = 0; t < 4; ++t) {
      for (std::uint32_t s = 0; s < 2; ++s) {
        layout.sources[s].regions.push_back({t, Box{{std::int64_t{512} * s, 0}, {512, 4096}}});
      }
    }
    layout.receivers = {wholeBindings(layout.manifest)};
    return layout;
  }
};

// Both sides report their bytes as they go, in steps, rising to what they read or took.
TEST(TcpRegionTransfer, BothSidesReportProgressInSteps) {
  const LargeRound large;
  ASSERT_TRUE(large.plan.has_value()) << large.plan.error().describe();
  const RegionPlan& plan = *large.plan;
  const TcpSources sources = sourcesFor(2);
  std::vector<std::vector<std::uint64_t>> sourceReports(2);
  std::vector<std::uint64_t> receiverReports;
  RoundOptions options;
  options.setUp = [&](Channel& channel, bool source, std::uint32_t index) {
    auto& reports = source ? sourceReports[index] : receiverReports;
    channel.setProgress([&reports](std::uint64_t bytes) { reports.push_back(bytes); });
  };
  const RegionRound round = runRound(sources, 1, plan, large.buffers, options);
  expectRoundDelivered(large.layout.manifest, plan, large.buffers, round);
  for (std::uint32_t s = 0; s < 2; ++s) {
    ASSERT_GE(sourceReports[s].size(), 2U) << "source " << s;
    EXPECT_TRUE(std::is_sorted(sourceReports[s].begin(), sourceReports[s].end()));
    EXPECT_EQ(sourceReports[s].back(), plan.bytesRead(s)) << "source " << s;
  }
  ASSERT_GE(receiverReports.size(), 3U);
  EXPECT_TRUE(std::is_sorted(receiverReports.begin(), receiverReports.end()));
  EXPECT_EQ(receiverReports.back(), plan.bytesReceived(0));
}

// A source that dies mid-transfer (here: cancelled after its first progress step, its channel closed as a dead
// process's sockets are): the receiver reports it gone, naming it, once its short grace has passed.
TEST(TcpRegionTransfer, ASourceGoneMidTransferIsNamedByItsReceiver) {
  const LargeRound large;
  ASSERT_TRUE(large.plan.has_value());
  const TcpSources sources = sourcesFor(2);
  std::atomic<bool> dying{false};
  RoundOptions options;
  options.setUp = [&](Channel& channel, bool source, std::uint32_t index) {
    if (!source || index != 1) return;
    channel.setProgress([&](std::uint64_t) { dying.store(true); });
    channel.setCancelProbe([&] { return dying.load(); });
  };
  const RegionRound round =
      test::runRegionRound(factoryOf(sources, {}, kShortSenderGoneGrace), 1, *large.plan, large.buffers, options);
  ASSERT_FALSE(round.sent[1].has_value());
  EXPECT_EQ(round.sent[1].error().code, ChannelError::Aborted) << round.sent[1].error().describe();
  ASSERT_FALSE(round.received[0].has_value());
  EXPECT_EQ(round.received[0].error().code, ChannelError::PeerGone) << round.received[0].error().describe();
  const std::string& detail = round.received[0].error().detail;
  EXPECT_TRUE(contains(detail, "tcp source 1 't1' at " + sources.contacts[1] + " closed the connection after"))
      << detail;
}

// A receiver that dies mid-transfer: each source it was reading from reports it gone, by its agent id and index.
TEST(TcpRegionTransfer, AReceiverGoneMidTransferIsNamedByItsSources) {
  const LargeRound large;
  ASSERT_TRUE(large.plan.has_value());
  const TcpSources sources = sourcesFor(2);
  std::atomic<bool> dying{false};
  RoundOptions options;
  options.setUp = [&](Channel& channel, bool source, std::uint32_t) {
    if (source) return;
    channel.setProgress([&](std::uint64_t) { dying.store(true); });
    channel.setCancelProbe([&] { return dying.load(); });
  };
  const RegionRound round = runRound(sources, 1, *large.plan, large.buffers, options);
  ASSERT_FALSE(round.received[0].has_value());
  EXPECT_EQ(round.received[0].error().code, ChannelError::Aborted) << round.received[0].error().describe();
  int named = 0;
  for (std::uint32_t s = 0; s < 2; ++s) {
    if (round.sent[s].has_value()) continue;  // it had sent all its bytes before the receiver went
    EXPECT_EQ(round.sent[s].error().code, ChannelError::PeerGone) << round.sent[s].error().describe();
    EXPECT_TRUE(contains(round.sent[s].error().detail, "receiver 'w0' (index 0")) << round.sent[s].error().detail;
    ++named;
  }
  EXPECT_GE(named, 1) << "the receiver went after its first step of 64 MiB: some source was still sending";
}

// Nobody left to end the round but the agents' cancel probes (the coordinator died): every side ends, naming itself
// and what it was doing, though one receiver stalls in its progress callback mid-transfer.
TEST(TcpRegionTransfer, ACancelProbeMidTransferEndsEverySide) {
  const LargeRound large;
  ASSERT_TRUE(large.plan.has_value());
  const TcpSources sources = sourcesFor(2);
  std::atomic<bool> stalled{false};
  std::atomic<bool> ended{false};
  RoundOptions options;
  options.setUp = [&](Channel& channel, bool source, std::uint32_t) {
    channel.setCancelProbe([&] { return ended.load(); });
    if (source) return;
    channel.setProgress([&](std::uint64_t) {
      stalled.store(true);
      while (!ended.load()) std::this_thread::sleep_for(1ms);
      // The sources see the round end first, as they would beside a receiver stalled elsewhere: a receiver that
      // left first would reset their connections, and they would report it gone instead.
      std::this_thread::sleep_for(kSettle);
    });
  };
  const auto start = Clock::now();
  RegionRound round;
  std::thread running([&] { round = runRound(sources, 5, *large.plan, large.buffers, options); });
  while (!stalled.load()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(kSettle);
  ended.store(true);
  running.join();
  for (std::uint32_t s = 0; s < 2; ++s) {
    ASSERT_FALSE(round.sent[s].has_value()) << "source " << s;
    EXPECT_EQ(round.sent[s].error().code, ChannelError::Aborted) << round.sent[s].error().describe();
    EXPECT_TRUE(contains(round.sent[s].error().detail, "transfer 5 cancelled while sending to 1 of 1 receivers"))
        << round.sent[s].error().detail;
  }
  ASSERT_FALSE(round.received[0].has_value());
  EXPECT_EQ(round.received[0].error().code, ChannelError::Aborted) << round.received[0].error().describe();
  EXPECT_LT(Clock::now() - start, test::kRegionTransferTimeout / 2);
}

// A source that never begins: its receiver gives up at the deadline naming it (the source it did reach was served
// first), and the source it reached names the receiver it waits for.
TEST(TcpRegionTransfer, ASourceThatNeverBeginsIsNamedAtTheDeadline) {
  const test::RegionLayout layout = shardedModel(2);
  auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
  ASSERT_TRUE(plan.has_value());
  const TcpSources sources = sourcesFor(2);
  RoundOptions options;
  options.absentSources = {1};
  options.timeout = kShortDeadline;
  const RegionRound round = runRound(sources, 3, *plan, test::sourceBuffers(layout.manifest, *plan), options);
  for (std::uint32_t r = 0; r < plan->receiverCount(); ++r) {
    if (plan->deliveries(1, r).empty()) continue;
    ASSERT_FALSE(round.received[r].has_value()) << "receiver " << r;
    EXPECT_EQ(round.received[r].error().code, ChannelError::Timeout);
    EXPECT_TRUE(contains(round.received[r].error().detail,
                         "timed out while connecting to tcp source 1 at " + sources.contacts[1]))
        << round.received[r].error().detail;
  }
  ASSERT_FALSE(round.sent[0].has_value());
  EXPECT_EQ(round.sent[0].error().code, ChannelError::Timeout) << round.sent[0].error().describe();
}

// A receiver that never comes: each source that has segments for it gives up at its deadline, naming its index; the
// receivers that came have everything.
TEST(TcpRegionTransfer, AReceiverThatNeverComesIsNamedByItsSources) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::F32, {16, 16}}});
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest), wholeBindings(manifest)});
  ASSERT_TRUE(plan.has_value());
  const TcpSources sources = sourcesFor(1);
  RoundOptions options;
  options.absentReceivers = {1};
  options.timeout = kShortDeadline;
  const Buffers buffers = test::sourceBuffers(manifest, *plan);
  const RegionRound round = runRound(sources, 4, *plan, buffers, options);
  ASSERT_FALSE(round.sent[0].has_value());
  EXPECT_EQ(round.sent[0].error().code, ChannelError::Timeout);
  EXPECT_TRUE(contains(round.sent[0].error().detail, "waiting for 1 of 2 receivers to connect (indexes 1)"))
      << round.sent[0].error().detail;
  ASSERT_TRUE(round.received[0].has_value()) << round.received[0].error().describe();
  test::expectBoundElements(manifest, plan->bindings(0), round.locals[0], "receiver 0");
}

// Receivers whose contacts name the sources in the wrong order reach source 1 asking for source 0: it refuses them,
// saying why, before any byte moves.
TEST(TcpRegionTransfer, AReceiverThatAsksTheWrongSourceIsRefused) {
  const test::RegionLayout layout = shardedModel(2);
  auto plan = planOf(layout.manifest, layout.sources, layout.receivers);
  ASSERT_TRUE(plan.has_value());
  const TcpSources sources = sourcesFor(2);
  RoundOptions options;
  options.timeout = kShortDeadline;
  const std::vector<std::string> swapped{sources.contacts[1], sources.contacts[0]};
  const RegionRound round =
      test::runRegionRound(factoryOf(sources, swapped), 6, *plan, test::sourceBuffers(layout.manifest, *plan), options);
  for (std::uint32_t r = 0; r < plan->receiverCount(); ++r) {
    ASSERT_FALSE(round.received[r].has_value()) << "receiver " << r;
    EXPECT_EQ(round.received[r].error().code, ChannelError::Refused) << round.received[r].error().describe();
    EXPECT_TRUE(contains(round.received[r].error().detail,
                         "it asked for another source of the round, or takes nothing from this one"))
        << round.received[r].error().detail;
  }
  for (std::uint32_t s = 0; s < 2; ++s) EXPECT_FALSE(round.sent[s].has_value()) << "source " << s;
}

// What does not fit is refused before any byte moves or any wait begins: buffers or locals of the wrong size, a
// source without a listener, a receiver without the contact of a source it takes from.
TEST(TcpRegionTransfer, WhatDoesNotFitThePlanMovesNothing) {
  const Manifest manifest = *Manifest::create({{"w", msg::DType::F32, {16, 16}}, {"v", msg::DType::U8, {9}}});
  auto plan = planOf(manifest, {wholeHoldings(manifest)}, {wholeBindings(manifest)});
  ASSERT_TRUE(plan.has_value());
  const TcpSources sources = sourcesFor(1);
  const auto deadline = Clock::now() + test::kRegionTransferTimeout;
  auto source = factoryOf(sources)(true, 0);
  ASSERT_TRUE(source.has_value());
  EXPECT_TRUE((*source)->carriesRegions());
  Buffers buffers = test::sourceBuffers(manifest, *plan);
  buffers[0][0].resize(100);
  auto sent = (*source)->sendRegions(1, *plan, 0, constSpansOf(buffers[0]), deadline);
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::PlanMismatch) << sent.error().describe();
  EXPECT_EQ((*source)->sendRegions(1, *plan, 1, constSpansOf(buffers[0]), deadline).error().code,
            ChannelError::PlanMismatch);
  EXPECT_FALSE(sources.listeners[0]->listening());

  auto receiver = factoryOf(sources)(false, 0);
  ASSERT_TRUE(receiver.has_value());
  auto locals = test::localsOf(plan->bindings(0));
  locals[1].resize(8);
  auto received = (*receiver)->receiveRegions(1, *plan, 0, spansOf<std::byte>(locals), deadline);
  ASSERT_FALSE(received.has_value());
  EXPECT_EQ(received.error().code, ChannelError::PlanMismatch);
  EXPECT_TRUE(contains(received.error().detail, "receiver 0's local tensor 'v' needs 9 bytes"))
      << received.error().detail;

  auto noListener = opened({nullptr, sources.contacts[0], sources.token});
  ASSERT_TRUE(noListener.has_value());
  EXPECT_EQ((*noListener)->sendRegions(1, *plan, 0, constSpansOf(buffers[0]), deadline).error().code,
            ChannelError::Unsupported);
  locals = test::localsOf(plan->bindings(0));
  auto noContacts = (*noListener)->receiveRegions(1, *plan, 0, spansOf<std::byte>(locals), deadline);
  ASSERT_FALSE(noContacts.has_value());
  EXPECT_EQ(noContacts.error().code, ChannelError::PlanMismatch);
  EXPECT_TRUE(contains(noContacts.error().detail, "takes segments from source 0, whose contact the plan lacks"))
      << noContacts.error().detail;
}

// Each round has its own key: every source's contact and the token.
TEST(TcpRegionTransfer, ARegionRoundsKeyNamesEverySourceAndTheToken) {
  const TcpSources sources = sourcesFor(2);
  auto receiver = factoryOf(sources)(false, 0);
  ASSERT_TRUE(receiver.has_value());
  EXPECT_EQ((*receiver)->key(), tcpChannelKey(std::span<const std::string>(sources.contacts), sources.token));
  EXPECT_TRUE(contains((*receiver)->key(), sources.contacts[0] + "," + sources.contacts[1]));
  EXPECT_NE((*receiver)->key(), tcpChannelKey(sources.contacts[0], sources.token));
}

}  // namespace
}  // namespace wsync::bus
