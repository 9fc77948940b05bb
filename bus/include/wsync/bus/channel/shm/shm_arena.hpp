#pragma once
// The shm payload channel (docs/shm-channel.md): one sender packs a version's tensors bucket by bucket into a ring
// of buffers in host shared memory while up to kMaxArenaReceivers receivers copy them out, each buffer refilled
// only once every receiver has drained it. Memory: bufferCount x bucketBytes, whatever the model's size.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include <boost/interprocess/mapped_region.hpp>
#include <tl/expected.hpp>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/shm/shm_arena_data.hpp"
#include "wsync/bus/channel/transfer_result.hpp"

namespace wsync::bus {

// Receivers of one arena as bits (receiver r is bit r): whom a bucket is for, whom the sender waits for.
using ReceiverSet = std::uint64_t;
static_assert(kMaxArenaReceivers <= 64, "a ReceiverSet has one bit a receiver");

// The receivers 0..count-1.
constexpr ReceiverSet firstReceivers(std::uint32_t count) {
  return count >= 64 ? ~ReceiverSet{0} : (ReceiverSet{1} << count) - 1;
}

// A region round's sources each fill a ring of their own: an arena of the bus's geometry named after the bus's,
// "<arena>-s<source>" (docs/shm-channel.md, "Region transfers"). The shm channel stays on one host, whose trainer
// ranks are tens at most, and every ring holds bufferCount x bucketBytes of shared memory for the coordinator's life.
inline constexpr std::uint32_t kMaxRegionSources = 64;
std::string sourceArenaName(const std::string& arena, std::uint32_t source);

struct ArenaGeometry {
  std::uint64_t bucketBytes = 0;
  std::uint32_t bufferCount = 2;
  std::uint32_t maxReceivers = 8;

  friend bool operator==(const ArenaGeometry&, const ArenaGeometry&) = default;
};

class ShmArena {
 public:
  // Creates segment `name` (mode 0600), replacing any left by a dead owner; removed again when the owner goes.
  static tl::expected<ShmArena, ChannelFailure> create(const std::string& name, const ArenaGeometry& geometry);
  static tl::expected<ShmArena, ChannelFailure> open(const std::string& name);

  ShmArena(ShmArena&& other) noexcept;
  ShmArena& operator=(ShmArena&&) = delete;
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;
  ~ShmArena();

  const std::string& name() const { return name_; }
  const ArenaGeometry& geometry() const { return geometry_; }

  // Makes every sender and receiver of `transfer` give up with Aborted within one wait slice.
  void abortTransfer(std::uint64_t transfer);

  // On both sides `progress`, if set, gets the bytes done after each bucket (Channel::setProgress), and
  // `cancelled`, if set, is asked whenever a side has to wait: true ends the transfer with Aborted (the agents
  // use it to give up when the coordinator that owns the arena is gone and can no longer abort it).
  // Sender side: packs `tensors` (indexed like the manifest) bucket after bucket. Receivers listed in `receivers`
  // must drain a buffer before it is refilled. Returns once every receiver has drained the last bucket, so
  // the next transfer may start at once.
  tl::expected<TransferResult, ChannelFailure> send(std::uint64_t transfer, const BucketPlan& plan,
                                                    std::span<const std::span<const std::byte>> tensors,
                                                    std::span<const std::uint32_t> receivers,
                                                    std::chrono::steady_clock::time_point deadline,
                                                    const std::function<void(std::uint64_t)>& progress = {},
                                                    const std::function<bool()>& cancelled = {});

  // Receiver side: copies every bucket of `transfer` into `tensors` (indexed like the manifest).
  tl::expected<TransferResult, ChannelFailure> receive(std::uint64_t transfer, const BucketPlan& plan,
                                                       std::span<const std::span<std::byte>> tensors,
                                                       std::uint32_t receiver,
                                                       std::chrono::steady_clock::time_point deadline,
                                                       const std::function<void(std::uint64_t)>& progress = {},
                                                       const std::function<bool()>& cancelled = {});

  // The ring's hand-off, one bucket at a time (docs/shm-channel.md, "Hand-off"): what send and receive are made of,
  // and the region transfers (shm_region_transfer.cpp), whose buckets each go to a set of receivers of their own.
  // Bucket k of a transfer lives in buffer k mod bufferCount. Every wait gives up on the arena's abort word, on
  // `cancelled` and at `deadline`, and a failure names the receiver or bucket it waited for.
  //
  // Sender: waits until every receiver in `receivers` has drained bucket `bucket` of `transfer` (those the bucket
  // was for: before its buffer is refilled with bucket + bufferCount, and at the end of a transfer).
  tl::expected<void, ChannelFailure> awaitDrained(std::uint64_t transfer, std::uint32_t bucket, ReceiverSet receivers,
                                                  std::chrono::steady_clock::time_point deadline,
                                                  const std::function<bool()>& cancelled) const;
  // Sender: the buffer bucket `bucket` goes into (bucketBytes long), to fill once its previous occupant is drained.
  std::byte* bucketBuffer(std::uint32_t bucket) const { return buffer(bucket % geometry_.bufferCount); }
  // Sender: tells the receivers that bucket `bucket` of `transfer` is in its buffer.
  void publishFilled(std::uint64_t transfer, std::uint32_t bucket) const;
  // Receiver: waits until bucket `bucket` of `transfer` is in its buffer, and returns the buffer; Overwritten if
  // the sender has already replaced it (possible only after an abort).
  tl::expected<const std::byte*, ChannelFailure> awaitFilled(std::uint64_t transfer, std::uint32_t bucket,
                                                             std::chrono::steady_clock::time_point deadline,
                                                             const std::function<bool()>& cancelled) const;
  // Receiver: after copying the bucket out, checks that it did not change during the copy (Overwritten otherwise)
  // and tells the sender `receiver` has drained it. Orders this thread's streaming stores before the ticket.
  tl::expected<void, ChannelFailure> publishDrained(std::uint64_t transfer, std::uint32_t bucket,
                                                    std::uint32_t receiver) const;

 private:
  ShmArena(boost::interprocess::mapped_region&& region, std::string name, ArenaGeometry geometry, bool owner)
      : region_(std::move(region)), name_(std::move(name)), geometry_(geometry), owner_(owner) {}

  ArenaControlData& control() const { return *static_cast<ArenaControlData*>(region_.get_address()); }
  std::byte* buffer(std::uint32_t index) const;

  boost::interprocess::mapped_region region_;
  std::string name_;
  ArenaGeometry geometry_;
  bool owner_;
};

}  // namespace wsync::bus
