#pragma once
// The payload channel interface (docs/architecture.md, "The channel seam"): how one round's bytes, cut into the
// buckets of a BucketPlan, move from the sender to the receivers without touching ZeroMQ. Everything a role needs
// from a transport is on this interface; the transports live in their own folders (channel/shm, channel/nccl,
// channel/cuda_ipc) and the roles reach them only through registry.hpp. The agents' side of it is
// PayloadEndpoint (payload_endpoint.hpp), the coordinator's ChannelOwner (channel_owner.hpp).
//
// Digests: both sides report a digest of the tensors' bytes in manifest order, independent of the bucket layout, so
// the coordinator compares the sender's with every receiver's. The host channel (shm) streams XXH3-128 as it copies;
// the GPU channels fold a device checksum (device_checksum.hpp) into their copy kernels. Both ends of a round use
// the same channel, so they compute the same kind.
//
// Cancellation: every channel asks its cancel probe whenever it waits (about every millisecond) and gives up with
// ChannelError::Aborted once the probe returns true (the agents pass "the coordinator ended this round, or died");
// the shm channel also wakes on its arena's abort word, which the coordinator sets. No side hangs on a dead peer.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/layout_key.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"
#include "wsync/bus/channel/transfer_result.hpp"

namespace wsync::bus {

// Where the tensors a channel moves live: a GPU channel's spans hold device addresses (never dereferenced on the
// host), the shm channel's host memory.
enum class TensorMemory : std::uint8_t { Host, Device };

// Whether an open channel can carry another transfer. A Broken one (an NCCL communicator aborted by its watchdog)
// fails every later transfer at once: its owner drops it, and the coordinator hands out new resources for the next
// round (docs/faults.md).
enum class ChannelState : std::uint8_t { Usable, Broken };

// Memory a channel holds beyond the caller's tensors (device memory for the GPU channels; the shm arena is the
// coordinator's and counted there).
struct ChannelMemory {
  std::uint64_t bufferBytes = 0;  // bucket buffers
  std::uint64_t tableBytes = 0;   // piece tables and digest words
};

// See Channel::setProgress.
using TransferProgress = std::function<void(std::uint64_t bytesDone)>;

class Channel {
 public:
  virtual ~Channel() = default;
  virtual msg::ChannelKind kind() const = 0;
  virtual TensorMemory tensorMemory() const = 0;
  virtual ChannelState state() const { return ChannelState::Usable; }
  virtual ChannelMemory memory() const { return {}; }
  // Asked whenever a transfer waits (see the top of this file); true makes it give up with ChannelError::Aborted.
  virtual void setCancelProbe(std::function<bool()> probe) = 0;
  // Drops what this end holds of its peers, for when one of them may have died (cuda_ipc: the handles a receiver
  // opened into the sender's memory, which died with the sender; they are opened again at the next transfer).
  virtual void releasePeers() {}
  // What identifies this channel's resources (for shm: the arena's segment name): an agent reopens the channel
  // when the key of a new plan differs, or when the coordinator restarted.
  virtual const std::string& key() const = 0;
  // Progress for monitors and progress bars: called on the transferring thread after each bucket this side has
  // finished, with the bytes of the tensors done so far (the agents store it in their control-block slot). It
  // must be cheap: it runs between buckets.
  void setProgress(TransferProgress progress) { progress_ = std::move(progress); }
  // Sender, for the next send(): whether the caller vouches that every tensor at the address it had in the previous
  // send is still in the allocation it was in then (nothing was freed and allocated again in its place). An
  // allocator that counts its frees can say so: PyTorch's num_device_free. A channel that keeps the tensors' memory
  // exported across transfers (cuda_ipc) then trusts its exports instead of asking the driver about each allocation
  // before the transfer (a driver query each: tens of milliseconds for 100,000 cudaMalloc blocks, every round). A
  // tensor whose address or size changed is exported again either way.
  void setAllocationsKept(bool kept) { allocationsKept_ = kept; }
  // For the next send() or receive(): the caller's name for its span array (LayoutKey). A nonzero token equal to
  // the one of an earlier transfer vouches that the array holds the same (address, size) pairs as then, and a
  // channel that caches a layout built for them trusts it without reading the array; 0, the default, vouches
  // nothing. Whether the memory behind the addresses is still the same allocation is setAllocationsKept's to say.
  void setLayoutToken(std::uint64_t token) { layoutToken_ = token; }

  // Sender: moves `tensors` (indexed like the manifest) bucket by bucket to receivers 0..receiverCount-1.
  virtual tl::expected<TransferResult, ChannelFailure> send(std::uint64_t transfer, const BucketPlan& plan,
                                                            std::span<const std::span<const std::byte>> tensors,
                                                            std::uint32_t receiverCount,
                                                            std::chrono::steady_clock::time_point deadline) = 0;
  // Receiver `receiver`: fills `tensors` (indexed like the manifest) with every bucket of `transfer`.
  virtual tl::expected<TransferResult, ChannelFailure> receive(std::uint64_t transfer, const BucketPlan& plan,
                                                               std::span<const std::span<std::byte>> tensors,
                                                               std::uint32_t receiver,
                                                               std::chrono::steady_clock::time_point deadline) = 0;

  // Region transfers (docs/regions.md): several sources, each sending its segments of `plan` to the receivers that
  // bind them. Whether this channel carries them; one that does not refuses both calls (Unsupported).
  virtual bool carriesRegions() const { return false; }
  // Source `source`: sends its segments from `buffers` (indexed like its holdings' regions), and reports what it sent
  // each receiver (indexed by receiver).
  virtual tl::expected<RegionTransferResult, ChannelFailure> sendRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
      std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline);
  // Receiver `receiver`: fills `locals` (indexed like its bindings' local tensors) from every source, and reports
  // what it took from each (indexed by source).
  virtual tl::expected<RegionTransferResult, ChannelFailure> receiveRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
      std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline);

 protected:
  void reportProgress(std::uint64_t bytesDone) const {
    if (progress_) progress_(bytesDone);
  }
  const TransferProgress& progress() const { return progress_; }
  bool allocationsKept() const { return allocationsKept_; }
  // The key of this transfer's span array, read or, under the caller's layout token, remembered.
  Digest layoutKeyOf(std::span<const std::span<const std::byte>> tensors) {
    return layoutKey_.of(tensors, layoutToken_);
  }
  Digest layoutKeyOf(std::span<const std::span<std::byte>> tensors) { return layoutKey_.of(tensors, layoutToken_); }
  std::uint64_t layoutReads() const { return layoutKey_.reads(); }

 private:
  TransferProgress progress_;
  bool allocationsKept_ = false;
  std::uint64_t layoutToken_ = 0;
  LayoutKey layoutKey_;
};

// The key of the channel a plan names, to compare with an open channel's key() (registry.hpp opens it).
std::string channelKey(const msg::TransferPlan& plan);

}  // namespace wsync::bus
