#pragma once
// The payload channel interface (shared/DESIGN.md, "Three planes"): how one round's bytes, cut into the buckets of
// a BucketPlan, move from the sender to the receivers without touching ZeroMQ. Agents open the channel a
// TransferPlan names and keep it for the rounds after; the coordinator owns whatever the channel needs to exist
// (the shm arena, the NCCL unique id and ranks, the cuda_ipc segment).
//
// Every implementation streams the XXH3-128 of the tensors' bytes in manifest order on both sides, so the digests
// the coordinator compares do not depend on the channel or the bucket layout. A transfer is cancelled through the
// channel's own abort mechanism (for shm: the arena's abort word), so no side hangs on a dead peer.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include <tl/expected.hpp>
#include <wsync/schemas/control_generated.h>

#include "wsync/bus/bucket_plan.hpp"
#include "wsync/bus/channel_error.hpp"
#include "wsync/bus/shm_arena.hpp"

namespace wsync::bus {

// Where the tensors a channel moves live: a GPU channel's spans hold device addresses (never dereferenced on the
// host), the shm channel's host memory.
enum class TensorMemory : std::uint8_t { Host, Device };

// See Channel::setProgress.
using TransferProgress = std::function<void(std::uint64_t bytesDone)>;

class Channel {
 public:
  virtual ~Channel() = default;
  virtual msg::ChannelKind kind() const = 0;
  virtual TensorMemory tensorMemory() const { return TensorMemory::Host; }
  // Called often (about every millisecond) while a transfer waits; once it returns true the transfer gives up
  // with ChannelError::Aborted. The GPU channels need it: a coordinator's abort must reach an agent blocked in a
  // transfer, and NCCL cannot see a dead peer. The shm channel has the arena's abort word instead and ignores it.
  virtual void setCancelProbe(std::function<bool()> probe) { (void)probe; }
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

 protected:
  void reportProgress(std::uint64_t bytesDone) const {
    if (progress_) progress_(bytesDone);
  }
  const TransferProgress& progress() const { return progress_; }

 private:
  TransferProgress progress_;
};

// The key of the channel a plan names, to compare with an open channel's key() (open_channel.hpp opens it).
std::string channelKey(const msg::TransferPlan& plan);

// The shm channel: the arena in host shared memory the coordinator created (docs/shm-channel.md).
class ShmChannel final : public Channel {
 public:
  static tl::expected<std::unique_ptr<ShmChannel>, ChannelFailure> open(const std::string& arenaName);

  msg::ChannelKind kind() const override { return msg::ChannelKind::Shm; }
  const std::string& key() const override { return arena_.name(); }
  tl::expected<TransferResult, ChannelFailure> send(std::uint64_t transfer, const BucketPlan& plan,
                                                    std::span<const std::span<const std::byte>> tensors,
                                                    std::uint32_t receiverCount,
                                                    std::chrono::steady_clock::time_point deadline) override;
  tl::expected<TransferResult, ChannelFailure> receive(std::uint64_t transfer, const BucketPlan& plan,
                                                       std::span<const std::span<std::byte>> tensors,
                                                       std::uint32_t receiver,
                                                       std::chrono::steady_clock::time_point deadline) override;
  // Asked whenever a side waits: the arena's abort word needs a live coordinator to set it.
  void setCancelProbe(std::function<bool()> probe) override { cancelProbe_ = std::move(probe); }

 private:
  explicit ShmChannel(ShmArena&& arena) : arena_(std::move(arena)) {}
  ShmArena arena_;
  std::function<bool()> cancelProbe_;
};

}  // namespace wsync::bus
