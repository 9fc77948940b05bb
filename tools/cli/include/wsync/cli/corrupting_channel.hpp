#pragma once
// TEST ONLY: a payload channel that forwards everything to the channel it wraps and spoils what one receive brought,
// so that the tests can prove a corrupted payload is caught by the coordinator's digest comparison and never applied
// (docs/faults.md, "Corrupted payloads"). Installed by FaultInjector (fault_injection.hpp) through
// bus::FaultHook::decorateChannel; the roles never name it.
#include <functional>
#include <memory>
#include <string>

#include "wsync/bus/channel/channel.hpp"

namespace wsync::cli {

class CorruptingChannel final : public bus::Channel {
 public:
  // `corruptNow` is asked after each receive that succeeded: true spoils that one. Host memory: one byte of the
  // received tensors is flipped and the digest of the corrupted bytes reported, as a bit flip in transit would be
  // seen. Device memory (never read on the host): a digest that cannot match is reported instead.
  CorruptingChannel(std::unique_ptr<bus::Channel> inner, std::function<bool()> corruptNow);

  msg::ChannelKind kind() const override { return inner_->kind(); }
  bus::TensorMemory tensorMemory() const override { return inner_->tensorMemory(); }
  bus::ChannelState state() const override { return inner_->state(); }
  bus::ChannelMemory memory() const override { return inner_->memory(); }
  void setCancelProbe(std::function<bool()> probe) override { inner_->setCancelProbe(std::move(probe)); }
  void releasePeers() override { inner_->releasePeers(); }
  const std::string& key() const override { return inner_->key(); }

  tl::expected<bus::TransferResult, bus::ChannelFailure> send(std::uint64_t transfer, const bus::BucketPlan& plan,
                                                              std::span<const std::span<const std::byte>> tensors,
                                                              std::uint32_t receiverCount,
                                                              std::chrono::steady_clock::time_point deadline) override;
  tl::expected<bus::TransferResult, bus::ChannelFailure> receive(
      std::uint64_t transfer, const bus::BucketPlan& plan, std::span<const std::span<std::byte>> tensors,
      std::uint32_t receiver, std::chrono::steady_clock::time_point deadline) override;
  bool carriesRegions() const override { return inner_->carriesRegions(); }
  tl::expected<bus::RegionTransferResult, bus::ChannelFailure> sendRegions(
      std::uint64_t transfer, const bus::RegionPlan& plan, std::uint32_t source,
      std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) override {
    return inner_->sendRegions(transfer, plan, source, buffers, deadline);
  }
  // A region round's receive is spoiled by a flipped byte in its first non-empty local tensor (host memory) and a
  // wrong digest for its first source that sent anything, which the coordinator's pair check must catch.
  tl::expected<bus::RegionTransferResult, bus::ChannelFailure> receiveRegions(
      std::uint64_t transfer, const bus::RegionPlan& plan, std::uint32_t receiver,
      std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) override;

 private:
  bus::TransferResult corrupt(const bus::TransferResult& received, std::span<const std::span<std::byte>> tensors);

  const std::unique_ptr<bus::Channel> inner_;
  const std::function<bool()> corruptNow_;
};

}  // namespace wsync::cli
