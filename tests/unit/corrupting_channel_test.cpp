// The corrupt-receive test fault (wsync::cli::FaultInjector with CorruptingChannel), against a test channel: it
// decorates only when asked for that fault, forwards everything else, spoils exactly the first receive of the
// round of its version (learnt from the hook's Begin), and reports a digest that matches the spoiled bytes on the
// host and cannot match on the device.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"
#include "wsync/cli/corrupting_channel.hpp"
#include "wsync/cli/fault_injection.hpp"

namespace wsync::cli {
namespace {

const auto kDeadline = std::chrono::steady_clock::time_point::max();

bus::TransferResult digestOf(std::span<const std::span<std::byte>> tensors) {
  bus::StreamDigest stream;
  for (const auto& tensor : tensors) stream.add(tensor.data(), tensor.size());
  return bus::TransferResult{stream.bytes(), stream.digest()};
}

// Fills every tensor with the same bytes at each receive and reports their digest, as the shm channel would; one
// progress report per tensor.
class FillingChannel final : public bus::Channel {
 public:
  explicit FillingChannel(bus::TensorMemory memory) : memory_(memory) {}

  msg::ChannelKind kind() const override { return msg::ChannelKind::Shm; }
  bus::TensorMemory tensorMemory() const override { return memory_; }
  void setCancelProbe(std::function<bool()> probe) override { probe_ = std::move(probe); }
  const std::string& key() const override { return key_; }

  tl::expected<bus::TransferResult, bus::ChannelFailure> send(std::uint64_t, const bus::BucketPlan&,
                                                              std::span<const std::span<const std::byte>>,
                                                              std::uint32_t,
                                                              std::chrono::steady_clock::time_point) override {
    ++sends;
    return bus::TransferResult{7, bus::Digest{1, 2}};
  }
  tl::expected<bus::TransferResult, bus::ChannelFailure> receive(std::uint64_t, const bus::BucketPlan&,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t,
                                                                 std::chrono::steady_clock::time_point) override {
    std::uint64_t done = 0;
    for (const auto& tensor : tensors) {
      for (std::size_t index = 0; index < tensor.size(); ++index) tensor[index] = std::byte(index * 7 + 3);
      done += tensor.size();
      reportProgress(done);
    }
    return digestOf(tensors);
  }

  bool hasProgress() const { return static_cast<bool>(progress()); }
  int sends = 0;
  std::function<bool()> probe_;

 private:
  bus::TensorMemory memory_;
  std::string key_ = "filling";
};

class CorruptReceive : public testing::Test {
 protected:
  // Decorates a FillingChannel through an injector for `fault`; `inner_` stays readable.
  std::unique_ptr<bus::Channel> decorated(const std::string& fault, bus::TensorMemory memory) {
    auto spec = parseFaultSpec(fault);
    EXPECT_TRUE(spec.has_value()) << spec.error();
    injector_ = std::make_unique<FaultInjector>(*spec);
    auto inner = std::make_unique<FillingChannel>(memory);
    inner_ = inner.get();
    std::unique_ptr<bus::Channel> channel = std::move(inner);
    injector_->decorateChannel(channel);
    return channel;
  }

  // One receive into fresh tensors: what it reported and the bytes it left.
  struct Received {
    bus::TransferResult result;
    std::vector<std::vector<std::byte>> bytes;
  };
  Received receive(bus::Channel& channel) {
    Received received;
    received.bytes = {std::vector<std::byte>(0), std::vector<std::byte>(40), std::vector<std::byte>(24)};
    std::vector<std::span<std::byte>> tensors(received.bytes.begin(), received.bytes.end());
    auto result = channel.receive(1, plan_, tensors, 0, kDeadline);
    EXPECT_TRUE(result.has_value());
    if (result) received.result = *result;
    return received;
  }
  static bus::TransferResult digestOf(std::vector<std::vector<std::byte>>& bytes) {
    std::vector<std::span<std::byte>> tensors(bytes.begin(), bytes.end());
    return cli::digestOf(tensors);
  }

  // The channels under test ignore the plan; the interface wants one.
  static bus::BucketPlan anyPlan() {
    auto manifest = bus::Manifest::create({bus::TensorSpec{"a", msg::DType::U8, {64}}});
    return *bus::BucketPlan::build(*manifest, 64, 16);
  }

  std::unique_ptr<FaultInjector> injector_;
  FillingChannel* inner_ = nullptr;
  const bus::BucketPlan plan_ = anyPlan();
};

TEST_F(CorruptReceive, ParsesAndDescribesItself) {
  const auto spec = parseFaultSpec("corrupt-receive@3");
  ASSERT_TRUE(spec.has_value()) << spec.error();
  EXPECT_EQ(spec->action, FaultAction::CorruptReceive);
  EXPECT_EQ(spec->version, 3U);
  EXPECT_EQ(describe(*spec), "corrupt-receive@3");
  EXPECT_FALSE(parseFaultSpec("corrupt-receive@0").has_value());
  EXPECT_FALSE(parseFaultSpec("corrupt-receive@x").has_value());
  EXPECT_FALSE(parseFaultSpec("corrupt-receive@transfer:3").has_value());
}

TEST_F(CorruptReceive, OtherFaultsLeaveTheChannelAsItIs) {
  auto channel = decorated("kill@transfer:3", bus::TensorMemory::Host);
  EXPECT_EQ(channel.get(), inner_);
}

TEST_F(CorruptReceive, SpoilsOnlyTheFirstReceiveOfTheRoundOfItsVersion) {
  auto channel = decorated("corrupt-receive@2", bus::TensorMemory::Host);
  ASSERT_NE(channel.get(), inner_);
  EXPECT_EQ(channel->key(), "filling");
  EXPECT_EQ(channel->tensorMemory(), bus::TensorMemory::Host);

  EXPECT_FALSE(injector_->reached(bus::FaultPoint::Begin, 1).has_value());
  Received intact = receive(*channel);
  EXPECT_EQ(intact.result.digest, digestOf(intact.bytes).digest) << "round of version 1: untouched";
  const auto intactBytes = intact.bytes;

  EXPECT_FALSE(injector_->reached(bus::FaultPoint::Begin, 2).has_value());
  Received spoiled = receive(*channel);
  EXPECT_NE(spoiled.bytes, intactBytes) << "one byte must be flipped";
  EXPECT_EQ(spoiled.bytes[1][0], intactBytes[1][0] ^ std::byte{0x01});  // the first byte of the first non-empty one
  EXPECT_EQ(spoiled.result.digest, digestOf(spoiled.bytes).digest) << "the digest of what is now there";
  EXPECT_NE(spoiled.result.digest, intact.result.digest);
  EXPECT_EQ(spoiled.result.bytes, 64U);

  Received again = receive(*channel);
  EXPECT_EQ(again.bytes, intactBytes) << "the fault strikes once";
  EXPECT_EQ(again.result.digest, intact.result.digest);
}

TEST_F(CorruptReceive, OnTheDeviceReportsADigestThatCannotMatchAndLeavesTheBytes) {
  auto channel = decorated("corrupt-receive@2", bus::TensorMemory::Device);
  EXPECT_FALSE(injector_->reached(bus::FaultPoint::Begin, 2).has_value());
  Received spoiled = receive(*channel);
  EXPECT_EQ(spoiled.result.bytes, 64U);
  EXPECT_NE(spoiled.result.digest, digestOf(spoiled.bytes).digest);
  EXPECT_EQ(spoiled.result.digest.hi, digestOf(spoiled.bytes).digest.hi);
}

TEST_F(CorruptReceive, ForwardsSendsProgressAndTheCancelProbe) {
  auto channel = decorated("corrupt-receive@2", bus::TensorMemory::Host);
  std::vector<std::uint64_t> progress;
  channel->setProgress([&](std::uint64_t bytes) { progress.push_back(bytes); });
  receive(*channel);
  EXPECT_EQ(progress, (std::vector<std::uint64_t>{0, 40, 64}));
  EXPECT_FALSE(inner_->hasProgress()) << "the inner channel holds no callback after the transfer";

  channel->setCancelProbe([] { return true; });
  ASSERT_TRUE(inner_->probe_);
  EXPECT_TRUE(inner_->probe_());
  EXPECT_TRUE(channel->send(1, plan_, {}, 1, kDeadline).has_value());
  EXPECT_EQ(inner_->sends, 1);
}

}  // namespace
}  // namespace wsync::cli
