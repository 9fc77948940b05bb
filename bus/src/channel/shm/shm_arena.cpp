#include "wsync/bus/channel/shm/shm_arena.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include <boost/interprocess/shared_memory_object.hpp>

#include "channel/shm/digest_copy.hpp"
#include "core/private_segment.hpp"
#include "wsync/bus/channel/shm/streaming_copy.hpp"
#include "wsync/bus/core/shared_futex.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {
namespace bip = boost::interprocess;
namespace {

using Clock = std::chrono::steady_clock;

// Longest single sleep on a futex word: an abort (which wakes nobody) or a deadline is noticed within it.
constexpr std::chrono::milliseconds kWaitSlice{20};

std::uint64_t ticketOf(std::uint64_t transfer, std::uint32_t bucket) {
  return (transfer << 32) | (std::uint64_t{bucket} + 1);
}

std::uint64_t dataOffset() {
  return (sizeof(ArenaControlData) + kArenaBufferAlignment - 1) / kArenaBufferAlignment * kArenaBufferAlignment;
}

tl::expected<void, ChannelFailure> checkGeometry(const ArenaGeometry& geometry) {
  if (geometry.bufferCount < 2 || geometry.bufferCount > kMaxArenaBuffers) {
    return fail(ChannelError::InvalidGeometry, std::to_string(geometry.bufferCount) + " buffers: use 2 to " +
                                                   std::to_string(kMaxArenaBuffers) + " (fill one, drain another)");
  }
  if (geometry.maxReceivers == 0 || geometry.maxReceivers > kMaxArenaReceivers) {
    return fail(ChannelError::InvalidGeometry,
                std::to_string(geometry.maxReceivers) + " receivers: use 1 to " + std::to_string(kMaxArenaReceivers));
  }
  if (geometry.bucketBytes == 0 || geometry.bucketBytes % kArenaBufferAlignment != 0 ||
      geometry.bucketBytes > (std::uint64_t{1} << 40)) {
    return fail(ChannelError::InvalidGeometry, "bucket size " + std::to_string(geometry.bucketBytes) +
                                                   " must be a positive multiple of " +
                                                   std::to_string(kArenaBufferAlignment) + ", at most 1 TiB");
  }
  return {};
}

// Waits until `ready()`, sleeping on `notify` (whose writer bumps it after each change that can make `ready` true).
// `what()` says what it waits for ("receiver 2 to drain bucket 5"), built only when the wait fails.
template <typename Ready, typename What>
tl::expected<void, ChannelFailure> await(const std::atomic<std::uint32_t>& notify, Ready&& ready,
                                         const ArenaHeaderData& header, std::uint64_t transfer,
                                         Clock::time_point deadline, What&& what,
                                         const std::function<bool()>& cancelled) {
  while (true) {
    // Read the notify word before the condition: a change after this load makes the futex return at once.
    const std::uint32_t seen = notify.load(std::memory_order_acquire);
    if (ready()) return {};
    if (header.abortedTransfer.load(std::memory_order_acquire) == transfer) {
      return fail(ChannelError::Aborted,
                  "transfer " + std::to_string(transfer) + " aborted while waiting for " + what());
    }
    if (cancelled && cancelled()) {
      return fail(ChannelError::Aborted,
                  "transfer " + std::to_string(transfer) + " cancelled while waiting for " + what());
    }
    const auto now = Clock::now();
    if (now >= deadline) return fail(ChannelError::Timeout, "timed out while waiting for " + what());
    (void)waitWhileEqual(notify, seen, std::min<Clock::duration>(kWaitSlice, deadline - now));
  }
}

void publish(std::atomic<std::uint64_t>& ticket, std::atomic<std::uint32_t>& notify, std::uint64_t value) {
  ticket.store(value, std::memory_order_release);
  notify.fetch_add(1, std::memory_order_release);
  wakeAll(notify);
}

// Every piece must fall inside the buffer bound for its tensor, checked before any byte moves: no plan, however
// wrong, makes a process write outside what it bound.
template <typename Byte>
tl::expected<void, ChannelFailure> checkBindings(const BucketPlan& plan, std::span<const std::span<Byte>> tensors,
                                                 const ArenaGeometry& geometry) {
  if (plan.bucketBytes() != geometry.bucketBytes) {
    return fail(ChannelError::PlanMismatch, "plan buckets of " + std::to_string(plan.bucketBytes()) +
                                                " bytes, arena buckets of " + std::to_string(geometry.bucketBytes));
  }
  for (const Piece& piece : plan.pieces()) {
    if (piece.tensor >= tensors.size() || piece.tensorOffset + piece.bytes > tensors[piece.tensor].size()) {
      return fail(ChannelError::PlanMismatch,
                  "tensor " + std::to_string(piece.tensor) + " needs " +
                      std::to_string(piece.tensorOffset + piece.bytes) + " bytes, the bound buffer has " +
                      std::to_string(piece.tensor < tensors.size() ? tensors[piece.tensor].size() : 0));
    }
  }
  return {};
}

tl::expected<bip::mapped_region, ChannelFailure> mapArena(const std::string& name, bool create,
                                                          const ArenaGeometry& geometry) {
  const std::uint64_t bytes = dataOffset() + geometry.bufferCount * geometry.bucketBytes;
  try {
    if (create) {
      bip::shared_memory_object::remove(name.c_str());
      bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, bip::permissions(0600));
      shm.truncate(static_cast<bip::offset_t>(bytes));
      return bip::mapped_region(shm, bip::read_write, 0, bytes);
    }
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    auto size = detail::privateSegmentSize(shm, name);
    if (!size) return fail(size.error().unsafe ? ChannelError::Unsafe : ChannelError::SystemError, size.error().detail);
    if (*size < dataOffset()) return fail(ChannelError::LayoutMismatch, name + " is too small for an arena");
    return bip::mapped_region(shm, bip::read_write, 0, *size);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) return fail(ChannelError::NoArena, "no arena " + name);
    return fail(ChannelError::SystemError, name + ": " + e.what());
  }
}

}  // namespace

std::string sourceArenaName(const std::string& arena, std::uint32_t source) {
  return arena + "-s" + std::to_string(source);
}

tl::expected<ShmArena, ChannelFailure> ShmArena::create(const std::string& name, const ArenaGeometry& geometry) {
  if (auto valid = checkGeometry(geometry); !valid) return tl::unexpected(valid.error());
  auto region = mapArena(name, true, geometry);
  if (!region) return tl::unexpected(region.error());
  auto& header = static_cast<ArenaControlData*>(region->get_address())->header;
  header.layoutVersion = kArenaLayoutVersion;
  header.bufferCount = geometry.bufferCount;
  header.bucketBytes = geometry.bucketBytes;
  header.dataOffset = dataOffset();
  header.segmentBytes = region->get_size();
  header.maxReceivers = geometry.maxReceivers;
  header.magic.store(kArenaMagic, std::memory_order_release);  // publishes the arena
  return ShmArena(std::move(*region), name, geometry, true);
}

tl::expected<ShmArena, ChannelFailure> ShmArena::open(const std::string& name) {
  auto region = mapArena(name, false, ArenaGeometry{});
  if (!region) return tl::unexpected(region.error());
  const auto& header = static_cast<const ArenaControlData*>(region->get_address())->header;
  if (header.magic.load(std::memory_order_acquire) != kArenaMagic || header.layoutVersion != kArenaLayoutVersion ||
      header.dataOffset != dataOffset() || header.segmentBytes != region->get_size()) {
    return fail(ChannelError::LayoutMismatch,
                name + " is not an initialised arena of layout " + std::to_string(kArenaLayoutVersion));
  }
  const ArenaGeometry geometry{header.bucketBytes, header.bufferCount, header.maxReceivers};
  if (auto valid = checkGeometry(geometry);
      !valid || dataOffset() + geometry.bufferCount * geometry.bucketBytes != header.segmentBytes) {
    return fail(ChannelError::LayoutMismatch, name + " has an inconsistent geometry");
  }
  return ShmArena(std::move(*region), name, geometry, false);
}

ShmArena::ShmArena(ShmArena&& other) noexcept
    : region_(std::move(other.region_)),
      name_(std::move(other.name_)),
      geometry_(other.geometry_),
      owner_(std::exchange(other.owner_, false)) {}

ShmArena::~ShmArena() {
  if (owner_) bip::shared_memory_object::remove(name_.c_str());
}

std::byte* ShmArena::buffer(std::uint32_t index) const {
  return static_cast<std::byte*>(region_.get_address()) + dataOffset() + index * geometry_.bucketBytes;
}

void ShmArena::abortTransfer(std::uint64_t transfer) {
  control().header.abortedTransfer.store(transfer, std::memory_order_release);
}

tl::expected<void, ChannelFailure> ShmArena::awaitDrained(std::uint64_t transfer, std::uint32_t bucket,
                                                          ReceiverSet receivers, Clock::time_point deadline,
                                                          const std::function<bool()>& cancelled) const {
  ArenaControlData& arena = control();
  const std::uint64_t ticket = ticketOf(transfer, bucket);
  for (std::uint32_t receiver = 0; receivers != 0; ++receiver, receivers >>= 1) {
    if ((receivers & 1U) == 0) continue;
    const ArenaDrainData& drain = arena.drains[bucket % geometry_.bufferCount][receiver];
    auto drained = await(
        drain.notify, [&] { return drain.ticket.load(std::memory_order_acquire) >= ticket; }, arena.header, transfer,
        deadline, [&] { return "receiver " + std::to_string(receiver) + " to drain bucket " + std::to_string(bucket); },
        cancelled);
    if (!drained) return drained;
  }
  return {};
}

void ShmArena::publishFilled(std::uint64_t transfer, std::uint32_t bucket) const {
  ArenaFillData& fill = control().fills[bucket % geometry_.bufferCount];
  publish(fill.ticket, fill.notify, ticketOf(transfer, bucket));
}

tl::expected<const std::byte*, ChannelFailure> ShmArena::awaitFilled(std::uint64_t transfer, std::uint32_t bucket,
                                                                     Clock::time_point deadline,
                                                                     const std::function<bool()>& cancelled) const {
  ArenaControlData& arena = control();
  const std::uint64_t wanted = ticketOf(transfer, bucket);
  const ArenaFillData& fill = arena.fills[bucket % geometry_.bufferCount];
  auto filled = await(
      fill.notify, [&] { return fill.ticket.load(std::memory_order_acquire) >= wanted; }, arena.header, transfer,
      deadline, [&] { return "the sender to fill bucket " + std::to_string(bucket); }, cancelled);
  if (!filled) return tl::unexpected(filled.error());
  if (fill.ticket.load(std::memory_order_acquire) != wanted) {
    return fail(ChannelError::Overwritten, "bucket " + std::to_string(bucket) + " was replaced before it was read");
  }
  return bucketBuffer(bucket);
}

tl::expected<void, ChannelFailure> ShmArena::publishDrained(std::uint64_t transfer, std::uint32_t bucket,
                                                            std::uint32_t receiver) const {
  ArenaControlData& arena = control();
  const std::uint32_t index = bucket % geometry_.bufferCount;
  const std::uint64_t wanted = ticketOf(transfer, bucket);
  finishStreamingCopies();  // the bucket's bytes land before its drain ticket says so
  // Seqlock-style: if the sender moved on during the copy (only after an abort), the copy may be torn. The fence
  // keeps the copy's reads before the re-check, which an acquire load alone would not.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (arena.fills[index].ticket.load(std::memory_order_relaxed) != wanted) {
    return fail(ChannelError::Overwritten, "bucket " + std::to_string(bucket) + " changed while it was copied");
  }
  ArenaDrainData& drain = arena.drains[index][receiver];
  publish(drain.ticket, drain.notify, wanted);
  return {};
}

tl::expected<TransferResult, ChannelFailure> ShmArena::send(std::uint64_t transfer, const BucketPlan& plan,
                                                            std::span<const std::span<const std::byte>> tensors,
                                                            std::span<const std::uint32_t> receivers,
                                                            Clock::time_point deadline,
                                                            const std::function<void(std::uint64_t)>& progress,
                                                            const std::function<bool()>& cancelled) {
  if (auto bound = checkBindings(plan, tensors, geometry_); !bound) return tl::unexpected(bound.error());
  ReceiverSet everyone = 0;
  for (std::uint32_t receiver : receivers) {
    if (receiver >= geometry_.maxReceivers) {
      return fail(ChannelError::PlanMismatch,
                  "receiver " + std::to_string(receiver) + " of " + std::to_string(geometry_.maxReceivers));
    }
    everyone |= ReceiverSet{1} << receiver;
  }
  StreamDigest digest;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    if (bucket >= geometry_.bufferCount) {
      // The buffer still holds bucket - bufferCount until every receiver has copied it out.
      auto drained = awaitDrained(transfer, bucket - geometry_.bufferCount, everyone, deadline, cancelled);
      if (!drained) return tl::unexpected(drained.error());
    }
    std::byte* target = bucketBuffer(bucket);
    for (const Piece& piece : plan.piecesOfBucket(bucket)) {
      const std::byte* source = tensors[piece.tensor].data() + piece.tensorOffset;
      packAndDigest(target + piece.bucketOffset, source, piece.bytes, digest);
    }
    publishFilled(transfer, bucket);
    if (progress) progress(digest.bytes());
  }
  // Only once every receiver has copied out the last bucket: the next transfer's first bufferCount buckets refill
  // these buffers without waiting (their predecessors in the ring are of an earlier transfer, whose receivers the
  // arena does not know), so returning earlier would let a sender that starts the next transfer at once replace
  // buckets a slow receiver has not read (it would fail with Overwritten, and the sender would wait for it).
  // Receivers copy buckets in order, so the last one stands for all.
  if (const std::uint32_t count = plan.bucketCount(); count > 0) {
    auto drained = awaitDrained(transfer, count - 1, everyone, deadline, cancelled);
    if (!drained) return tl::unexpected(drained.error());
  }
  return TransferResult{digest.bytes(), digest.digest()};
}

tl::expected<TransferResult, ChannelFailure> ShmArena::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                               std::span<const std::span<std::byte>> tensors,
                                                               std::uint32_t receiver, Clock::time_point deadline,
                                                               const std::function<void(std::uint64_t)>& progress,
                                                               const std::function<bool()>& cancelled) {
  if (auto bound = checkBindings(plan, tensors, geometry_); !bound) return tl::unexpected(bound.error());
  if (receiver >= geometry_.maxReceivers) {
    return fail(ChannelError::PlanMismatch,
                "receiver " + std::to_string(receiver) + " of " + std::to_string(geometry_.maxReceivers));
  }
  StreamDigest digest;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    auto source = awaitFilled(transfer, bucket, deadline, cancelled);
    if (!source) return tl::unexpected(source.error());
    for (const Piece& piece : plan.piecesOfBucket(bucket)) {
      std::byte* target = tensors[piece.tensor].data() + piece.tensorOffset;
      unpackAndDigest(target, *source + piece.bucketOffset, piece.bytes, digest);
    }
    if (auto drained = publishDrained(transfer, bucket, receiver); !drained) return tl::unexpected(drained.error());
    if (progress) progress(digest.bytes());
  }
  return TransferResult{digest.bytes(), digest.digest()};
}

}  // namespace wsync::bus
