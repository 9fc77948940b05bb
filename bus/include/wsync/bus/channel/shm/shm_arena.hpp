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
