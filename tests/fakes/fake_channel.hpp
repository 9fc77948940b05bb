#pragma once
// A payload channel that moves nothing (tests/fakes: shared by the unit tests): it reports what a channel would,
// logs what it was asked, and fails on demand. The caller keeps the log; every channel made with it writes there,
// so a test still reads it after the code under test took the channels.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wsync/bus/channel/channel.hpp"

namespace wsync::test {

// What the fake channels of one test did, and what the next transfer of any of them does.
struct FakeChannelLog {
  int opened = 0;  // counted by the test's factory
  int transfers = 0;
  std::vector<std::string> keys;           // of every channel opened, in order (the factory's to fill)
  std::vector<bool> allocationsKept;       // what each send was told (Channel::setAllocationsKept)
  std::vector<bus::Digest> layoutKeys;     // each transfer's key of its span array (Channel::layoutKeyOf)
  std::vector<std::uint64_t> layoutReads;  // how many arrays the channel had read by then

  // The next transfer fails with this error; `nextBreaks`: and leaves the channel Broken, as an aborted
  // communicator.
  std::optional<bus::ChannelError> nextFailure;
  bool nextBreaks = false;
  // Every transfer asks the cancel probe first and gives up with Aborted if it says so.
  bool askProbe = false;
};

class FakeChannel final : public bus::Channel {
 public:
  FakeChannel(std::string key, bus::TensorMemory memory, FakeChannelLog& log)
      : key_(std::move(key)), memory_(memory), log_(log) {}

  msg::ChannelKind kind() const override { return msg::ChannelKind::Shm; }
  bus::TensorMemory tensorMemory() const override { return memory_; }
  bus::ChannelState state() const override { return broken_ ? bus::ChannelState::Broken : bus::ChannelState::Usable; }
  void setCancelProbe(std::function<bool()> probe) override { probe_ = std::move(probe); }
  const std::string& key() const override { return key_; }

  using Deadline = std::chrono::steady_clock::time_point;
  tl::expected<bus::TransferResult, bus::ChannelFailure> send(std::uint64_t transfer, const bus::BucketPlan& plan,
                                                              std::span<const std::span<const std::byte>> tensors,
                                                              std::uint32_t receiverCount, Deadline deadline) override;
  tl::expected<bus::TransferResult, bus::ChannelFailure> receive(std::uint64_t transfer, const bus::BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t receiver, Deadline deadline) override;

  // The digest every transfer that succeeds reports.
  static constexpr bus::Digest kDigest{1, 2};

 private:
  void logLayout(const bus::Digest& key);
  // Reports one progress call per bucket and kDigest, unless the log asks for a failure.
  tl::expected<bus::TransferResult, bus::ChannelFailure> transfer(const bus::BucketPlan& plan);

  std::string key_;
  bus::TensorMemory memory_;
  FakeChannelLog& log_;
  std::function<bool()> probe_;
  bool broken_ = false;
};

}  // namespace wsync::test
