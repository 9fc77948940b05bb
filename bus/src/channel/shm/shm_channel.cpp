#include "wsync/bus/channel/shm/shm_channel.hpp"

#include <vector>

#include "channel/shm/shm_region_transfer.hpp"

namespace wsync::bus {

tl::expected<std::unique_ptr<ShmChannel>, ChannelFailure> ShmChannel::open(const std::string& arenaName) {
  auto arena = ShmArena::open(arenaName);
  if (!arena) return tl::unexpected(arena.error());
  return std::unique_ptr<ShmChannel>(new ShmChannel(std::move(*arena)));
}

tl::expected<TransferResult, ChannelFailure> ShmChannel::send(std::uint64_t transfer, const BucketPlan& plan,
                                                              std::span<const std::span<const std::byte>> tensors,
                                                              std::uint32_t receiverCount,
                                                              std::chrono::steady_clock::time_point deadline) {
  std::vector<std::uint32_t> receivers(receiverCount);
  for (std::uint32_t index = 0; index < receiverCount; ++index) receivers[index] = index;
  return arena_.send(transfer, plan, tensors, receivers, deadline, progress(), cancelProbe_);
}

tl::expected<TransferResult, ChannelFailure> ShmChannel::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                                 std::span<const std::span<std::byte>> tensors,
                                                                 std::uint32_t receiver,
                                                                 std::chrono::steady_clock::time_point deadline) {
  return arena_.receive(transfer, plan, tensors, receiver, deadline, progress(), cancelProbe_);
}

tl::expected<const ShmArena*, ChannelFailure> ShmChannel::ringOf(std::uint32_t source) {
  if (source >= kMaxRegionSources) {
    return fail(ChannelError::PlanMismatch, "source " + std::to_string(source) + " of at most " +
                                                std::to_string(kMaxRegionSources) + " on the shm channel");
  }
  if (rings_.size() <= source) rings_.resize(source + 1);
  if (!rings_[source]) {
    auto ring = ShmArena::open(sourceArenaName(arena_.name(), source));
    if (!ring) {
      ChannelFailure failure = std::move(ring.error());
      failure.detail = "the ring of source " + std::to_string(source) + ": " + failure.detail;
      return tl::unexpected(std::move(failure));
    }
    rings_[source] = std::make_unique<ShmArena>(std::move(*ring));
  }
  return rings_[source].get();
}

tl::expected<RegionTransferResult, ChannelFailure> ShmChannel::sendRegions(
    std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
    std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) {
  auto ring = ringOf(source);
  if (!ring) return tl::unexpected(ring.error());
  return sendRegionStream(**ring, transfer, plan, source, buffers, deadline, progress(), cancelProbe_);
}

// The sources one after another, each to the end, in source order. That cannot deadlock, although a source waits
// for its receivers to drain its ring, because every receiver takes the sources in the same order and a source waits
// on nothing but its own ring's receivers. Take the lowest source s that has not finished: every source below it
// returned, which each did only once all its receivers had drained it, so every receiver of s has moved on to s,
// and a live s then goes through as a round of one sender would; then the next. The sources above s meanwhile fill
// their rings and wait. (A dead s costs a Timeout or an abort, as any dead sender.) Receivers taking the sources in
// different orders could deadlock: receiver 0 at source 0 and receiver 1 at source 1, each source with a full ring
// waiting for the other receiver.
tl::expected<RegionTransferResult, ChannelFailure> ShmChannel::receiveRegions(
    std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) {
  if (receiver >= plan.receiverCount()) {
    return fail(ChannelError::PlanMismatch,
                "receiver " + std::to_string(receiver) + " of a plan of " + std::to_string(plan.receiverCount()));
  }
  RegionTransferResult result(plan.sourceCount(), PairDigest().result());
  std::uint64_t took = 0;  // from the sources before this one, for progress
  const std::function<void(std::uint64_t)> progressOfSource = [&](std::uint64_t bytes) {
    reportProgress(took + bytes);
  };
  for (std::uint32_t source = 0; source < plan.sourceCount(); ++source) {
    if (plan.deliveries(source, receiver).empty()) continue;  // nothing from it: its ring is not opened
    auto ring = ringOf(source);
    if (!ring) return tl::unexpected(ring.error());
    auto pair =
        receiveRegionStream(**ring, transfer, plan, source, receiver, locals, deadline, progressOfSource, cancelProbe_);
    if (!pair) return tl::unexpected(pair.error());
    result[source] = *pair;
    took += pair->bytes;
  }
  return result;
}

}  // namespace wsync::bus
