#pragma once
// A region round run by every source and receiver on a thread of its own, each with its own channel as processes
// would have, for the tests of the channels that carry region rounds (shm, tcp): the channel comes from the test's
// factory, and the checks hold for any channel. What every side reported is checked against the others' reports and
// against digests computed from the checkpoint alone (region_transfer.hpp's digest rule).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <tl/expected.hpp>

#include "random_host_model.hpp"
#include "region_layouts.hpp"
#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::test {

using Buffers = std::vector<std::vector<std::vector<std::byte>>>;  // [source][held region]

struct RegionRound {
  std::vector<tl::expected<bus::RegionTransferResult, bus::ChannelFailure>> sent;      // [source]
  std::vector<tl::expected<bus::RegionTransferResult, bus::ChannelFailure>> received;  // [receiver]
  std::vector<std::vector<std::vector<std::byte>>> locals;                             // [receiver][local]
};

// A side's channel: a source's (source true) or a receiver's, by its index.
using RegionChannelFactory =
    std::function<tl::expected<std::unique_ptr<bus::Channel>, bus::ChannelFailure>(bool source, std::uint32_t index)>;

// Generous: a transfer of a few MB takes milliseconds; only a broken hand-off comes near it.
inline constexpr std::chrono::seconds kRegionTransferTimeout{30};

// How the sides of a round take part: an absent side never starts (dead, or never given the plan); `setUp` prepares
// each side's channel (progress, cancel probe) before its transfer.
struct RoundOptions {
  std::vector<std::uint32_t> absentSources;
  std::vector<std::uint32_t> absentReceivers;
  std::chrono::steady_clock::duration timeout = kRegionTransferTimeout;
  std::function<void(bus::Channel&, bool source, std::uint32_t index)> setUp;
};

inline bus::ChannelFailure absentSide() {
  return bus::ChannelFailure{bus::ChannelError::Unsupported, "did not take part"};
}

inline bool listed(const std::vector<std::uint32_t>& list, std::uint32_t index) {
  return std::find(list.begin(), list.end(), index) != list.end();
}

template <typename Byte>
std::vector<std::span<Byte>> spansOf(std::vector<std::vector<std::byte>>& buffers) {
  return {buffers.begin(), buffers.end()};
}

inline std::vector<std::span<const std::byte>> constSpansOf(const std::vector<std::vector<std::byte>>& buffers) {
  return {buffers.begin(), buffers.end()};
}

inline RegionRound runRegionRound(const RegionChannelFactory& open, std::uint64_t transfer, const bus::RegionPlan& plan,
                                  const Buffers& buffers, const RoundOptions& options = {}) {
  RegionRound round;
  round.sent.assign(plan.sourceCount(), tl::unexpected(absentSide()));
  round.received.assign(plan.receiverCount(), tl::unexpected(absentSide()));
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) round.locals.push_back(localsOf(plan.bindings(r)));
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::vector<std::thread> threads;
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
    if (listed(options.absentSources, s)) continue;
    threads.emplace_back([&, s] {
      auto channel = open(true, s);
      if (!channel) {
        round.sent[s] = tl::unexpected(channel.error());
        return;
      }
      if (options.setUp) options.setUp(**channel, true, s);
      round.sent[s] = (*channel)->sendRegions(transfer, plan, s, constSpansOf(buffers[s]), deadline);
    });
  }
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    if (listed(options.absentReceivers, r)) continue;
    threads.emplace_back([&, r] {
      auto channel = open(false, r);
      if (!channel) {
        round.received[r] = tl::unexpected(channel.error());
        return;
      }
      if (options.setUp) options.setUp(**channel, false, r);
      round.received[r] = (*channel)->receiveRegions(transfer, plan, r, spansOf<std::byte>(round.locals[r]), deadline);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return round;
}

// What source s sent receiver r, computed from the sources' buffers alone by the digest rule (region_transfer.hpp):
// each delivery's segment bytes in segment order, folded in send order.
inline bus::PairResult expectedPair(const bus::RegionPlan& plan, const Buffers& buffers, std::uint32_t s,
                                    std::uint32_t r) {
  bus::PairDigest pair;
  for (const bus::Delivery& delivery : plan.deliveries(s, r)) {
    const bus::Segment& segment = plan.segments()[delivery.segment];
    bus::StreamDigest digest;
    for (const bus::ByteRun& run : plan.sourceRuns(segment))
      digest.add(buffers[s][segment.held].data() + run.offset, run.bytes);
    pair.add(segment.bytes, digest.digest());
  }
  return pair.result();
}

// Every side succeeded, and every pair's two reports agree with each other and with the checkpoint.
inline void expectPairsAgree(const bus::RegionPlan& plan, const Buffers& buffers, const RegionRound& round) {
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
    ASSERT_TRUE(round.sent[s].has_value()) << "source " << s << ": " << round.sent[s].error().describe();
    ASSERT_EQ(round.sent[s]->size(), plan.receiverCount());
  }
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    ASSERT_TRUE(round.received[r].has_value()) << "receiver " << r << ": " << round.received[r].error().describe();
    ASSERT_EQ(round.received[r]->size(), plan.sourceCount());
  }
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
    for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
      const bus::PairResult& sent = (*round.sent[s])[r];
      EXPECT_EQ(sent, (*round.received[r])[s]) << "source " << s << " receiver " << r;
      EXPECT_EQ(sent, expectedPair(plan, buffers, s, r)) << "source " << s << " receiver " << r;
      EXPECT_EQ(sent.bytes, plan.bytes(s, r)) << "source " << s << " receiver " << r;
      if (plan.deliveries(s, r).empty()) {
        EXPECT_EQ(sent, bus::PairDigest().result()) << "source " << s << " receiver " << r;
      }
    }
  }
}

// The round succeeded and every receiver holds exactly the checkpoint's elements it binds.
inline void expectRoundDelivered(const bus::Manifest& manifest, const bus::RegionPlan& plan, const Buffers& buffers,
                                 const RegionRound& round) {
  expectPairsAgree(plan, buffers, round);
  for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
    expectBoundElements(manifest, plan.bindings(r), round.locals[r], "receiver " + std::to_string(r));
  }
}

// A region round of one source holding the whole model into whole receivers, run by `run`, landed what the round of
// one sender did (`legacy`, which landed `staging`): the model's bytes, as many as it.
inline void expectTheRoundOfOneSendersBytes(
    const HostModel& model, const std::function<RegionRound(const bus::RegionPlan&, const Buffers&)>& run,
    const std::vector<tl::expected<bus::TransferResult, bus::ChannelFailure>>& legacy,
    const std::vector<std::vector<std::vector<std::byte>>>& staging) {
  const auto receivers = static_cast<std::uint32_t>(legacy.size());
  auto plan = planOf(model.manifest, {bus::wholeHoldings(model.manifest)},
                     std::vector<bus::ReceiverBindings>(receivers, bus::wholeBindings(model.manifest)));
  ASSERT_TRUE(plan.has_value()) << plan.error().describe();
  const Buffers buffers{model.tensors};
  const RegionRound round = run(*plan, buffers);
  expectPairsAgree(*plan, buffers, round);
  for (std::uint32_t r = 0; r < receivers; ++r) {
    ASSERT_TRUE(legacy[r].has_value()) << legacy[r].error().describe();
    EXPECT_EQ(staging[r], model.tensors) << "legacy receiver " << r;
    EXPECT_EQ(round.locals[r], model.tensors) << "region receiver " << r;
    EXPECT_EQ((*round.received[r])[0].bytes, legacy[r]->bytes) << "receiver " << r;
  }
}

// A model of a few layers, sharded by dim 0 over `sources` (FSDP2: ceil-sized shards, the last smaller), its norm
// replicated on every source and a small bias held by the last; bound by three tensor-parallel receivers (row
// slices of embed and qkv cut 3 ways, column slices of o), one that binds the whole model (o's column halves
// swapped), and one that binds only the norm and the bias (nothing from most sources).
inline RegionLayout shardedModel(std::uint32_t sources) {
  using bus::Box;
  using bus::HeldRegion;
  using bus::ReceiverBindings;
  std::vector<bus::TensorSpec> tensors = {{"embed", msg::DType::BF16, {300, 64}},
                                          {"qkv", msg::DType::BF16, {192, 128}},
                                          {"o", msg::DType::BF16, {128, 192}},
                                          {"norm", msg::DType::F32, {128}},
                                          {"bias", msg::DType::U8, {7}}};
  RegionLayout layout{*bus::Manifest::create(tensors), std::vector<bus::SourceHoldings>(sources), {}};
  for (std::uint32_t t = 0; t < 3; ++t) {
    const auto& shape = tensors[t].shape;
    const std::int64_t rows = (shape[0] + sources - 1) / sources;
    for (std::uint32_t s = 0; s < sources; ++s) {
      const std::int64_t first = std::min<std::int64_t>(s * rows, shape[0]);
      const std::int64_t count = std::min<std::int64_t>(rows, shape[0] - first);
      if (count > 0) layout.sources[s].regions.push_back(HeldRegion{t, Box{{first, 0}, {count, shape[1]}}});
    }
  }
  for (std::uint32_t s = 0; s < sources; ++s) layout.sources[s].regions.push_back(HeldRegion{3, Box{{0}, {128}}});
  layout.sources[sources - 1].regions.push_back(HeldRegion{4, Box{{0}, {7}}});

  constexpr std::int64_t kTp = 3;
  for (std::int64_t rank = 0; rank < kTp; ++rank) {
    ReceiverBindings bindings;
    bindings.locals = {{"embed", msg::DType::BF16, {100, 64}},
                       {"qkv", msg::DType::BF16, {64, 128}},
                       {"o", msg::DType::BF16, {128, 64}},
                       {"norm", msg::DType::F32, {128}}};
    bindings.regions = {{"embed", Box{{rank * 100, 0}, {100, 64}}, 0, {0, 0}, {100, 64}},
                        {"qkv", Box{{rank * 64, 0}, {64, 128}}, 1, {0, 0}, {64, 128}},
                        {"o", Box{{0, rank * 64}, {128, 64}}, 2, {0, 0}, {128, 64}},
                        {"norm", Box{{0}, {128}}, 3, {0}, {128}}};
    layout.receivers.push_back(std::move(bindings));
  }
  // The whole model, o with its column halves swapped (a fused local tensor: a run a row on both sides).
  ReceiverBindings whole = bus::wholeBindings(layout.manifest);
  whole.regions[2] = {"o", Box{{0, 0}, {128, 96}}, 2, {0, 96}, {128, 96}};
  whole.regions.push_back({"o", Box{{0, 96}, {128, 96}}, 2, {0, 0}, {128, 96}});
  layout.receivers.push_back(std::move(whole));
  ReceiverBindings small;
  small.locals = {{"norm", msg::DType::F32, {128}}, {"bias", msg::DType::U8, {7}}};
  small.regions = {{"norm", Box{{0}, {128}}, 0, {0}, {128}}, {"bias", Box{{0}, {7}}, 1, {0}, {7}}};
  layout.receivers.push_back(std::move(small));
  return layout;
}

}  // namespace wsync::test
