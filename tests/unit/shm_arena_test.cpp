// The shm arena: every byte reaches every receiver through a ring of buffers much smaller than the payload, the
// digests of both sides agree, transfers follow each other, and a stuck receiver, an abort or a plan that does
// not fit the bound buffers fail cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "random_host_model.hpp"
#include "test_environment.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"

namespace wsync::bus {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Generous: a transfer of a few MB takes milliseconds; only a broken hand-off comes near it.
constexpr auto kTransferTimeout = 30s;
// How long the stuck-receiver test lets the sender wait before it must report Timeout.
constexpr auto kShortDeadline = 300ms;

std::string arenaName() { return "wsync-test-arena-" + test::uniqueBusName("a"); }

using test::HostModel;
using test::makeHostModel;
using test::stagingFor;
using test::views;

TEST(ShmArena, RefusesBadGeometry) {
  const std::string name = arenaName();
  EXPECT_EQ(ShmArena::create(name, {4096, 1, 1}).error().code, ChannelError::InvalidGeometry);
  EXPECT_EQ(ShmArena::create(name, {4096, kMaxArenaBuffers + 1, 1}).error().code, ChannelError::InvalidGeometry);
  EXPECT_EQ(ShmArena::create(name, {4096, 2, 0}).error().code, ChannelError::InvalidGeometry);
  EXPECT_EQ(ShmArena::create(name, {1000, 2, 1}).error().code, ChannelError::InvalidGeometry);
  EXPECT_EQ(ShmArena::open(name).error().code, ChannelError::NoArena);
}

TEST(ShmArena, OpenSeesTheGeometryAndTheOwnerRemovesIt) {
  const std::string name = arenaName();
  {
    auto owner = ShmArena::create(name, {8192, 3, 5});
    ASSERT_TRUE(owner.has_value()) << owner.error().describe();
    auto opened = ShmArena::open(name);
    ASSERT_TRUE(opened.has_value()) << opened.error().describe();
    EXPECT_EQ(opened->geometry(), (ArenaGeometry{8192, 3, 5}));
  }
  EXPECT_EQ(ShmArena::open(name).error().code, ChannelError::NoArena);
}

// Three receivers, two 64 KiB buffers, a payload of megabytes: many refills per buffer, several transfers in a row.
TEST(ShmArena, EveryReceiverGetsEveryByteAcrossTransfers) {
  constexpr std::uint32_t kReceivers = 3;
  const ArenaGeometry geometry{64 * 1024, 2, kReceivers};
  auto owner = ShmArena::create(arenaName(), geometry);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();

  for (std::uint64_t transfer = 1; transfer <= 5; ++transfer) {
    SCOPED_TRACE("transfer " + std::to_string(transfer));
    const HostModel model = makeHostModel(transfer, 60);
    auto plan = BucketPlan::build(model.manifest, geometry.bucketBytes, 256);
    ASSERT_TRUE(plan.has_value());
    ASSERT_GT(plan->bucketCount(), 4 * geometry.bufferCount) << "the test must make buffers go round";

    std::vector<std::vector<std::vector<std::byte>>> staging(kReceivers, stagingFor(model.manifest));
    std::vector<tl::expected<TransferResult, ChannelFailure>> received(kReceivers);
    std::vector<std::thread> receivers;
    for (std::uint32_t r = 0; r < kReceivers; ++r) {
      receivers.emplace_back([&, r] {
        auto arena = ShmArena::open(owner->name());  // each receiver maps the arena itself, as a process would
        if (!arena) {
          received[r] = tl::unexpected(arena.error());
          return;
        }
        received[r] = arena->receive(transfer, *plan, views(staging[r]), r, Clock::now() + kTransferTimeout);
      });
    }
    const std::vector<std::uint32_t> all{0, 1, 2};
    auto sent = owner->send(transfer, *plan, views(model.tensors), all, Clock::now() + kTransferTimeout);
    for (std::thread& thread : receivers) thread.join();

    ASSERT_TRUE(sent.has_value()) << sent.error().describe();
    EXPECT_EQ(sent->bytes, model.manifest.totalBytes());
    for (std::uint32_t r = 0; r < kReceivers; ++r) {
      ASSERT_TRUE(received[r].has_value()) << "receiver " << r << ": " << received[r].error().describe();
      EXPECT_EQ(received[r]->bytes, sent->bytes);
      EXPECT_EQ(received[r]->digest, sent->digest) << "receiver " << r;
      EXPECT_EQ(staging[r], model.tensors) << "receiver " << r;
    }
  }
}

// Both sides report their bytes after every bucket: rising, one report per bucket, ending at the payload's size
// (what monitors and progress bars read from the agents' slots).
TEST(ShmArena, BothSidesReportProgressAfterEveryBucket) {
  const ArenaGeometry geometry{64 * 1024, 2, 1};
  auto owner = ShmArena::create(arenaName(), geometry);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  const HostModel model = makeHostModel(7, 40);
  auto plan = BucketPlan::build(model.manifest, geometry.bucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  ASSERT_GT(plan->bucketCount(), 2U);

  std::vector<std::uint64_t> sentReports;
  std::vector<std::uint64_t> receivedReports;
  std::vector<std::vector<std::byte>> staging = stagingFor(model.manifest);
  tl::expected<TransferResult, ChannelFailure> received = tl::unexpected(ChannelFailure{});
  std::thread receiver([&] {
    auto arena = ShmArena::open(owner->name());
    ASSERT_TRUE(arena.has_value());
    received = arena->receive(1, *plan, views(staging), 0, Clock::now() + kTransferTimeout,
                              [&](std::uint64_t bytes) { receivedReports.push_back(bytes); });
  });
  const std::vector<std::uint32_t> one{0};
  auto sent = owner->send(1, *plan, views(model.tensors), one, Clock::now() + kTransferTimeout,
                          [&](std::uint64_t bytes) { sentReports.push_back(bytes); });
  receiver.join();
  ASSERT_TRUE(sent.has_value()) << sent.error().describe();
  ASSERT_TRUE(received.has_value()) << received.error().describe();
  for (const auto* reports : {&sentReports, &receivedReports}) {
    ASSERT_EQ(reports->size(), plan->bucketCount());
    EXPECT_TRUE(std::is_sorted(reports->begin(), reports->end()));
    EXPECT_GT(reports->front(), 0U);
    EXPECT_EQ(reports->back(), model.manifest.totalBytes());
  }
}

// The digest is that of the tensors' bytes in order, whatever the bucket layout.
TEST(ShmArena, DigestDoesNotDependOnTheLayout) {
  const HostModel model = makeHostModel(42, 20);
  std::vector<Digest> digests;
  for (const std::uint64_t bucket : {std::uint64_t{4096}, std::uint64_t{65536}}) {
    auto owner = ShmArena::create(arenaName(), {bucket, 2, 1});
    ASSERT_TRUE(owner.has_value());
    auto plan = BucketPlan::build(model.manifest, bucket, 64);
    auto staging = stagingFor(model.manifest);
    tl::expected<TransferResult, ChannelFailure> received;
    std::thread receiver(
        [&] { received = owner->receive(1, *plan, views(staging), 0, Clock::now() + kTransferTimeout); });
    const std::vector<std::uint32_t> one{0};
    auto sent = owner->send(1, *plan, views(model.tensors), one, Clock::now() + kTransferTimeout);
    receiver.join();
    ASSERT_TRUE(sent.has_value() && received.has_value());
    digests.push_back(sent->digest);
  }
  EXPECT_EQ(digests[0], digests[1]);
}

TEST(ShmArena, SenderTimesOutOnAStuckReceiver) {
  const ArenaGeometry geometry{4096, 2, 2};
  auto owner = ShmArena::create(arenaName(), geometry);
  ASSERT_TRUE(owner.has_value());
  const HostModel model = makeHostModel(3, 30);
  auto plan = BucketPlan::build(model.manifest, geometry.bucketBytes, 64);
  ASSERT_GT(plan->bucketCount(), geometry.bufferCount);
  // Receiver 1 is listed but never drains: the sender fills both buffers and must then give up, not hang.
  const std::vector<std::uint32_t> stuck{1};
  auto sent = owner->send(7, *plan, views(model.tensors), stuck, Clock::now() + kShortDeadline);
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::Timeout);
}

TEST(ShmArena, AbortReleasesAWaitingReceiver) {
  auto owner = ShmArena::create(arenaName(), {4096, 2, 1});
  ASSERT_TRUE(owner.has_value());
  const HostModel model = makeHostModel(4, 5);
  auto plan = BucketPlan::build(model.manifest, 4096, 64);
  auto staging = stagingFor(model.manifest);
  tl::expected<TransferResult, ChannelFailure> received;
  const auto start = Clock::now();
  // No sender: only the abort can end the wait before the long deadline.
  std::thread receiver(
      [&] { received = owner->receive(9, *plan, views(staging), 0, Clock::now() + kTransferTimeout); });
  std::this_thread::sleep_for(50ms);
  owner->abortTransfer(9);
  receiver.join();
  ASSERT_FALSE(received.has_value());
  EXPECT_EQ(received.error().code, ChannelError::Aborted);
  EXPECT_LT(Clock::now() - start, kTransferTimeout / 2);
}

// Nobody left to set the abort word (the coordinator died mid-transfer): the agents' cancel probe ends both a
// receiver waiting for a bucket and a sender waiting for a receiver that never got its plan.
TEST(ShmArena, ACancelProbeReleasesAWaitingReceiverAndSender) {
  auto owner = ShmArena::create(arenaName(), {4096, 2, 2});
  ASSERT_TRUE(owner.has_value());
  const HostModel model = makeHostModel(5, 9);
  auto plan = BucketPlan::build(model.manifest, 4096, 64);
  ASSERT_GT(plan->bucketCount(), 2U) << "the sender must have to wait for a drain";
  auto staging = stagingFor(model.manifest);
  std::atomic<bool> coordinatorGone{false};
  const std::function<bool()> cancelled = [&] { return coordinatorGone.load(); };
  tl::expected<TransferResult, ChannelFailure> received;
  tl::expected<TransferResult, ChannelFailure> sent;
  const auto start = Clock::now();
  // Receiver 0 takes part; receiver 1 never shows up, so the sender stalls after filling both buffers and
  // receiver 0 waits for a bucket that cannot come.
  std::thread receiver(
      [&] { received = owner->receive(11, *plan, views(staging), 0, Clock::now() + kTransferTimeout, {}, cancelled); });
  std::thread sender([&] {
    const std::vector<std::uint32_t> receivers{0, 1};
    sent = owner->send(11, *plan, views(model.tensors), receivers, Clock::now() + kTransferTimeout, {}, cancelled);
  });
  std::this_thread::sleep_for(100ms);
  coordinatorGone.store(true);
  receiver.join();
  sender.join();
  ASSERT_FALSE(received.has_value());
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(received.error().code, ChannelError::Aborted);
  EXPECT_EQ(sent.error().code, ChannelError::Aborted);
  EXPECT_NE(sent.error().detail.find("cancelled"), std::string::npos) << sent.error().detail;
  EXPECT_LT(Clock::now() - start, kTransferTimeout / 2);
}

TEST(ShmArena, PlanThatDoesNotFitTheBindingsMovesNothing) {
  auto owner = ShmArena::create(arenaName(), {4096, 2, 1});
  ASSERT_TRUE(owner.has_value());
  const HostModel model = makeHostModel(5, 6);
  auto plan = BucketPlan::build(model.manifest, 4096, 64);
  auto staging = stagingFor(model.manifest);
  staging.back().resize(staging.back().size() / 2);  // a bound buffer too small for its tensor
  auto received = owner->receive(1, *plan, views(staging), 0, Clock::now() + kShortDeadline);
  ASSERT_FALSE(received.has_value());
  EXPECT_EQ(received.error().code, ChannelError::PlanMismatch);
  staging.pop_back();  // a tensor with no bound buffer at all
  EXPECT_EQ(owner->receive(1, *plan, views(staging), 0, Clock::now()).error().code, ChannelError::PlanMismatch);

  auto otherBuckets = BucketPlan::build(model.manifest, 8192, 64);
  const std::vector<std::uint32_t> one{0};
  EXPECT_EQ(owner->send(1, *otherBuckets, views(model.tensors), one, Clock::now()).error().code,
            ChannelError::PlanMismatch);
  const std::vector<std::uint32_t> outOfRange{1};
  EXPECT_EQ(owner->send(1, *plan, views(model.tensors), outOfRange, Clock::now()).error().code,
            ChannelError::PlanMismatch);
}

}  // namespace
}  // namespace wsync::bus
