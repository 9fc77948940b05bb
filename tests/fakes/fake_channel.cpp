#include "fake_channel.hpp"

#include <utility>

namespace wsync::test {

tl::expected<bus::TransferResult, bus::ChannelFailure> FakeChannel::send(
    std::uint64_t, const bus::BucketPlan& plan, std::span<const std::span<const std::byte>> tensors, std::uint32_t,
    std::chrono::steady_clock::time_point) {
  log_.allocationsKept.push_back(allocationsKept());
  logLayout(layoutKeyOf(tensors));
  return transfer(plan);
}

tl::expected<bus::TransferResult, bus::ChannelFailure> FakeChannel::receive(
    std::uint64_t, const bus::BucketPlan& plan, std::span<const std::span<std::byte>> tensors, std::uint32_t,
    std::chrono::steady_clock::time_point) {
  logLayout(layoutKeyOf(tensors));
  return transfer(plan);
}

void FakeChannel::logLayout(const bus::Digest& key) {
  log_.layoutKeys.push_back(key);
  log_.layoutReads.push_back(layoutReads());
}

tl::expected<bus::TransferResult, bus::ChannelFailure> FakeChannel::transfer(const bus::BucketPlan& plan) {
  ++log_.transfers;
  if (log_.askProbe && probe_ && probe_()) return bus::fail(bus::ChannelError::Aborted, "cancelled by the probe");
  if (log_.nextFailure) {
    const bus::ChannelError error = *std::exchange(log_.nextFailure, std::nullopt);
    broken_ = std::exchange(log_.nextBreaks, false);
    return bus::fail(error, "the fake channel failed on purpose");
  }
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) reportProgress(bucket + 1);
  return bus::TransferResult{plan.bucketCount(), kDigest};
}

}  // namespace wsync::test
