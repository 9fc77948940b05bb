// PayloadEndpoint, the agents' one end of the payload plane, against a fake channel (tests/fakes): no shared memory,
// no GPU, no coordinator. What it must do for every transport alike: reuse a channel while its key holds, reopen it
// when the key changes or it broke, check the plan before a byte moves, refuse the wrong memory, and say why a
// transfer failed.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "fake_channel.hpp"
#include "test_environment.hpp"
#include "wsync/bus/channel/payload_endpoint.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/message.hpp"

namespace wsync::bus {
namespace {

constexpr std::chrono::seconds kDeadline{5};
constexpr std::uint64_t kBucketBytes = 64;
constexpr std::uint32_t kAlignment = 16;

class PayloadEndpointTest : public testing::Test {
 protected:
  void SetUp() override {
    SessionOptions options;
    options.bus = test::uniqueBusName("payload");
    options.agentId = "endpoint-under-test";
    options.role = msg::Role::Worker;
    // Never registered: no coordinator is needed for what the endpoint decides on its own.
    auto opened = AgentSession::open(context_, options);
    ASSERT_TRUE(opened.has_value()) << opened.error().describe();
    session_ = std::move(*opened);
    endpoint_ = std::make_unique<PayloadEndpoint>(
        *session_, 0, kDeadline,
        [this](const msg::TransferPlan& plan,
               const ChannelSetup&) -> tl::expected<std::unique_ptr<Channel>, ChannelFailure> {
          ++log_.opened;
          log_.keys.push_back(channelKey(plan));
          return std::make_unique<test::FakeChannel>(channelKey(plan), memory_, log_);
        });
    auto built = Manifest::create({TensorSpec{"a", msg::DType::F32, {40}}, TensorSpec{"b", msg::DType::BF16, {8, 8}}});
    ASSERT_TRUE(built.has_value());
    manifest_.emplace(std::move(*built));
    auto buckets = BucketPlan::build(*manifest_, kBucketBytes, kAlignment);
    ASSERT_TRUE(buckets.has_value());
    bucketCount_ = buckets->bucketCount();
  }

  // A TransferPlan as the coordinator sends it; `receivers` 0 means nobody to move to.
  const msg::TransferPlan& plan(const std::string& arena, std::uint32_t receivers = 1, std::int32_t receiver = 0,
                                std::uint32_t bucketCount = 0) {
    builder_.reset();
    auto& fbb = builder_.fbb();
    const msg::Digest128 digest = toMessage(manifest_->digest());
    const auto body = msg::CreateTransferPlan(fbb, 1, 1, msg::ChannelKind::Shm, &digest, manifest_->totalBytes(),
                                              kBucketBytes, bucketCount != 0 ? bucketCount : bucketCount_, 2,
                                              kAlignment, fbb.CreateString(arena), 0, -1, 0, receiver, receivers);
    auto bytes = builder_.finish(body, EnvelopeStamp{1, 1});
    wire_.assign(bytes.begin(), bytes.end());
    auto decoded = Message::decode(wire_);
    EXPECT_TRUE(decoded.has_value());
    message_.emplace(std::move(*decoded));
    return *message_->as<msg::TransferPlan>();
  }

  tl::expected<TransferResult, PayloadFailure> receiveOn(const std::string& arena) {
    auto transfer = endpoint_->prepare(plan(arena), *manifest_, TensorMemory::Host);
    if (!transfer) return tl::unexpected(transfer.error());
    return endpoint_->receive(*transfer, tensors_, 0, {});
  }

  zmq::context_t context_{1};
  std::unique_ptr<AgentSession> session_;
  std::unique_ptr<PayloadEndpoint> endpoint_;
  test::FakeChannelLog log_;
  TensorMemory memory_ = TensorMemory::Host;
  std::optional<Manifest> manifest_;
  std::uint32_t bucketCount_ = 0;
  MessageBuilder builder_;
  std::vector<std::uint8_t> wire_;
  std::optional<Message> message_;
  std::vector<std::span<std::byte>> tensors_;
};

TEST_F(PayloadEndpointTest, ReusesAChannelWhileItsKeyHoldsAndReopensWhenItChanges) {
  ASSERT_TRUE(receiveOn("arena-1").has_value());
  ASSERT_TRUE(receiveOn("arena-1").has_value());
  EXPECT_EQ(log_.opened, 1);
  EXPECT_EQ(log_.transfers, 2);
  ASSERT_TRUE(receiveOn("arena-2").has_value());
  EXPECT_EQ(log_.keys, (std::vector<std::string>{"arena-1", "arena-2"}));
  // After reset() (a lost link, a new registration) nothing opened before is used again.
  endpoint_->reset();
  ASSERT_TRUE(receiveOn("arena-2").has_value());
  EXPECT_EQ(log_.opened, 3);
}

TEST_F(PayloadEndpointTest, ABrokenChannelIsDroppedAndTheNextTransferOpensANewOne) {
  log_.nextFailure = ChannelError::CommunicatorError;
  log_.nextBreaks = true;
  const auto failed = receiveOn("group-1");
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().reason, msg::AbortReason::ChannelFailure);
  EXPECT_EQ(failed.error().cause, FailureCause::Local);
  ASSERT_TRUE(receiveOn("group-1").has_value());
  EXPECT_EQ(log_.opened, 2);
  // A failure that leaves the channel usable keeps it.
  log_.nextFailure = ChannelError::Overwritten;
  ASSERT_FALSE(receiveOn("group-1").has_value());
  ASSERT_TRUE(receiveOn("group-1").has_value());
  EXPECT_EQ(log_.opened, 2);
}

TEST_F(PayloadEndpointTest, APlanThatDisagreesWithTheManifestIsRefusedBeforeAnythingOpens) {
  const auto refused = endpoint_->prepare(plan("arena-1", 1, 0, bucketCount_ + 1), *manifest_, TensorMemory::Host);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().detail.find("the coordinator plans " + std::to_string(bucketCount_ + 1) + " buckets"),
            std::string::npos)
      << refused.error().detail;
  EXPECT_EQ(log_.opened, 0);
}

TEST_F(PayloadEndpointTest, AChannelOfTheOtherMemoryIsRefusedNamingBoth) {
  memory_ = TensorMemory::Device;
  const auto refused = endpoint_->prepare(plan("ipc-1"), *manifest_, TensorMemory::Host);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().detail.find("moves device memory and this agent's tensors are host memory"),
            std::string::npos)
      << refused.error().detail;
  // Without a memory to match (a trainer's tensors are what its channel moves), the same channel is taken.
  EXPECT_TRUE(endpoint_->prepare(plan("ipc-1"), *manifest_, std::nullopt).has_value());
}

// The sender's word on its allocations reaches the channel with each send, and only that send.
TEST_F(PayloadEndpointTest, EachSendTellsTheChannelWhetherTheAllocationsWereKept) {
  auto transfer = endpoint_->prepare(plan("arena-1"), *manifest_, std::nullopt);
  ASSERT_TRUE(transfer.has_value()) << transfer.error().detail;
  std::vector<std::byte> a(manifest_->tensorBytes(0));
  std::vector<std::byte> b(manifest_->tensorBytes(1));
  const std::vector<std::span<const std::byte>> tensors{a, b};
  for (const bool kept : {true, false, true}) {
    const auto sent = endpoint_->send(*transfer, tensors, kept, 0, {});
    ASSERT_TRUE(sent.has_value()) << sent.error().detail;
  }
  EXPECT_EQ(log_.allocationsKept, (std::vector<bool>{true, false, true}));
}

// A layout token reaches the channel with each transfer: a token named before spares reading the array again; 0 and
// a new token do not. (The channel's cached layouts then trust the remembered key: bus/channel/layout_key.hpp.)
TEST_F(PayloadEndpointTest, ALayoutTokenNamedBeforeSparesTheChannelReadingTheSpanArray) {
  auto transfer = endpoint_->prepare(plan("arena-1"), *manifest_, std::nullopt);
  ASSERT_TRUE(transfer.has_value()) << transfer.error().detail;
  std::vector<std::byte> a(manifest_->tensorBytes(0));
  std::vector<std::byte> b(manifest_->tensorBytes(1));
  const std::vector<std::span<const std::byte>> tensors{a, b};
  for (const std::uint64_t token : std::vector<std::uint64_t>{7, 7, 0, 0, 8, 8, 7}) {
    const auto sent = endpoint_->send(*transfer, tensors, false, token, {});
    ASSERT_TRUE(sent.has_value()) << sent.error().detail;
  }
  EXPECT_EQ(log_.layoutReads, (std::vector<std::uint64_t>{1, 1, 2, 3, 4, 4, 5}));
  for (const Digest& key : log_.layoutKeys) EXPECT_EQ(key, log_.layoutKeys.front());  // one array, one key

  auto received = endpoint_->prepare(plan("arena-1"), *manifest_, TensorMemory::Host);
  ASSERT_TRUE(received.has_value()) << received.error().detail;
  for (const std::uint64_t token : std::vector<std::uint64_t>{3, 3}) {
    ASSERT_TRUE(endpoint_->receive(*received, tensors_, token, {}).has_value());
  }
  EXPECT_EQ(log_.layoutReads.back(), 6u);  // the receive's first read, its second none
}

TEST_F(PayloadEndpointTest, WithoutReceiversNothingOpensAndTheVersionCountsAsSent) {
  auto transfer = endpoint_->prepare(plan("arena-1", 0, -1), *manifest_, std::nullopt);
  ASSERT_TRUE(transfer.has_value()) << transfer.error().detail;
  const auto sent = endpoint_->send(*transfer, {}, false, 0, {});
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->bytes, manifest_->totalBytes());
  EXPECT_EQ(log_.opened, 0);
}

TEST_F(PayloadEndpointTest, FailuresSayWhetherAPeerStalledOrTheRoundWasCancelled) {
  log_.nextFailure = ChannelError::Timeout;
  const auto stalled = receiveOn("arena-1");
  ASSERT_FALSE(stalled.has_value());
  EXPECT_EQ(stalled.error().cause, FailureCause::PeerStalled);
  EXPECT_EQ(stalled.error().reason, msg::AbortReason::Timeout);
  // This session never registered, so to the endpoint's probe the round is over (as after a lost link).
  log_.askProbe = true;
  const auto cancelled = receiveOn("arena-1");
  ASSERT_FALSE(cancelled.has_value());
  EXPECT_EQ(cancelled.error().cause, FailureCause::Cancelled);
}

TEST_F(PayloadEndpointTest, ProgressReachesTheCallerAfterEveryBucket) {
  auto transfer = endpoint_->prepare(plan("arena-1"), *manifest_, TensorMemory::Host);
  ASSERT_TRUE(transfer.has_value());
  std::vector<std::uint64_t> seen;
  ASSERT_TRUE(endpoint_->receive(*transfer, tensors_, 0, [&](std::uint64_t bytes) { seen.push_back(bytes); }));
  EXPECT_EQ(seen.size(), bucketCount_);
}

}  // namespace
}  // namespace wsync::bus
