#pragma once
// The nccl channel (docs/gpu-channels.md): one communicator of the sender (rank 0) and every receiver (ranks 1..N),
// buckets broadcast from rank 0; or, in a region round (docs/regions.md), of the sources (ranks 0..M-1) and the
// receivers (ranks M..M+N-1), each pair's pieces sent point to point in steps (region_steps.hpp).
//
// Per broadcast (a slice, broadcast_slices.hpp): a bucket holding one piece (a run of one tensor that fills it) is
// broadcast straight from the sender's tensor into the receiver's tensor; the other buckets' bytes, consecutive
// packed buckets as one stream, are cut into slices, each packed on the sender by one kernel launch (all the slice's
// pieces at once, with the digest folded in), broadcast, and unpacked on each receiver by one kernel launch. The
// packed slices take bufferCount staging buffers in turn, with CUDA events ordering the pack, broadcast and unpack
// streams: the host enqueues a whole transfer without waiting on the device, then watches it.
//
// The defaults below each say why in a line; the measurements behind them are in docs/gpu-channels.md ("Why the
// defaults").
//
// Watchdog: the ranks join a non-blocking communicator, and broadcast through a blocking child of it (NcclEnqueue),
// each call watched by a BlockingCallGuard (the first one connects the ranks, which NCCL does lazily). While a
// transfer runs the host polls its events, NCCL's async error and the cancel probe. A cancel (Aborted), the deadline
// or no bucket finishing within stallTimeout (Timeout), or an NCCL error (CommunicatorError) aborts the
// communicators (ncclCommAbort: NCCL's kernels see the abort flag and return), the transfer fails, and the channel
// is Broken (state()) from then on: the next round opens a new one with a new unique id.
//
// Memory: bufferCount staging buffers on each side, each as large as the largest packed slice (at most
// maxSliceBytes: half a bucket by default, so two buffers take one bucket), allocated at the first transfer and
// grown if a plan needs more; plus the piece tables (48 bytes a piece) and NCCL's own buffers.
//
// Threading: one thread uses a channel at a time (and the guard's thread, which calls the cancel probe only while
// that thread is inside a blocking NCCL call). The calling thread's current CUDA device must be the channel's.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/gpu/gpu_runtime.hpp"
#include "wsync/bus/channel/nccl/broadcast_slices.hpp"
#include "wsync/bus/channel/nccl/nccl_enqueue.hpp"
#include "wsync/bus/channel/nccl/nccl_timeline.hpp"

namespace wsync::bus::gpu {

// A transfer that finishes no bucket for this long is declared stuck (a frozen or dead peer NCCL cannot see) and
// aborted: far above any live bucket's broadcast, even on a slow network, and short enough that a round fails
// instead of hanging.
inline constexpr std::chrono::seconds kNcclStallTimeout{20};
// Staging buffers the packed slices rotate through: one being broadcast while the next is packed (sender) or the
// previous is unpacked (receivers).
inline constexpr std::uint32_t kNcclDefaultBuffers = 2;
// The largest broadcast, and so each staging buffer, by default: the plan's bucket over this. Two buffers of half a
// bucket stage one bucket, which leaves room for NCCL's own buffers within 2 buckets of extra memory per side; the
// cost is a broadcast more per bucket, and NCCL's fixed cost per call with it.
inline constexpr std::uint64_t kNcclSlicesPerBucket = 2;
// The first and last broadcasts of a transfer (broadcast_slices.hpp): the sender's first pack and a receiver's last
// unpack overlap nothing, and at this size they are short; smaller slices would add broadcasts, each with NCCL's
// fixed cost per call.
inline constexpr std::uint64_t kNcclFirstSliceBytes = 64ULL * 1024 * 1024;
// How often a running transfer looks at its events, NCCL's error state and the cancel probe: short against a
// bucket's broadcast, long enough not to burn a core. It is also how late a rank may see its transfer's end (a sleep
// often takes longer than asked on a VM).
inline constexpr std::chrono::microseconds kNcclPollInterval{100};
// Kernel blocks the pack/unpack launches may use while NCCL runs: few enough to leave its own blocks room (the
// broadcasts run faster beside fewer), enough for a copy beside a broadcast of its own size to finish within it.
inline constexpr std::uint32_t kNcclDefaultCopyBlocks = 32;
// ... where the copy has more bytes than the broadcast it runs beside (NcclChannelConfig::rampCopyBlocks): a ramp's
// twice the bytes in the same time, which kNcclDefaultCopyBlocks do not make (the broadcasts wait for them).
inline constexpr std::uint32_t kNcclDefaultRampCopyBlocks = 64;

// A region step's staging by default: as the slices of a plan with the default GPU bucket (1 GiB) over
// kNcclSlicesPerBucket, so that a region round's two buffers take a bucket, as a broadcast's do.
inline constexpr std::uint64_t kNcclDefaultRegionStepBytes = std::uint64_t{512} << 20;

struct NcclChannelConfig {
  NcclUniqueId uniqueId{};
  std::int32_t rank = -1;       // 0: the sender
  std::uint32_t worldSize = 0;  // sender + receivers
  std::uint32_t bufferCount = kNcclDefaultBuffers;
  std::chrono::milliseconds stallTimeout{kNcclStallTimeout};
  // 0: the transfer's thread yields between looks instead of sleeping (a core kept busy for the transfer's length,
  // its end seen within microseconds; wsync-bench gpu --nccl-poll-us measures the difference).
  std::chrono::microseconds pollInterval{kNcclPollInterval};
  std::uint32_t copyBlocks = kNcclDefaultCopyBlocks;
  // Kernel blocks of a copy beside a smaller broadcast than itself, in a ramp (the sender's pack of slice k + 1
  // while slice k is broadcast, a receiver's unpack of slice k while k + 1 is): twice the bytes in the same time.
  std::uint32_t rampCopyBlocks = kNcclDefaultRampCopyBlocks;
  // broadcastSlices' firstSliceBytes: 0 (no ramp) or a multiple of kSliceAlignment. Every rank of
  // a communicator must use the same value: the broadcasts' sizes must match.
  std::uint64_t firstSliceBytes = kNcclFirstSliceBytes;
  // broadcastSlices' maxSliceBytes, the staging buffers' size: 0 for the plan's bucket over kNcclSlicesPerBucket
  // (rounded up to kSliceAlignment). Every rank must use the same value.
  std::uint64_t maxSliceBytes = 0;
  // Watched while open() waits for the other ranks, like the probe of setCancelProbe during transfers.
  std::function<bool()> cancelProbe{};
  // NCCL's ncclConfig_t::maxCTAs for this communicator, 0 for NCCL's own choice. NCCL allocates its buffers per
  // channel (one CTA each), so fewer cost less GPU memory and leave SMs to the unpack kernels beside the broadcasts,
  // perhaps at the broadcasts' speed (wsync-bench gpu --nccl-max-ctas measures it).
  std::int32_t maxCtas = 0;
  // How broadcasts reach NCCL (NcclEnqueue). Every rank of a communicator must use the same: the child's split is
  // collective, so a rank that does not split leaves the others waiting until the deadline.
  NcclEnqueue enqueue = NcclEnqueue::BlockingChild;
  // A region round's staging per step on each rank (region_steps.hpp; bufferCount buffers of it): 0 for
  // kNcclDefaultRegionStepBytes. Every rank must use the same value: the sends' and receives' sizes must match.
  std::uint64_t regionStepBytes = 0;
  // Profiling (nccl_timeline.hpp): timing events around every broadcast and copy, read back after each transfer.
  // Off in the agents; on, each slice costs four event records more.
  bool timeline = false;
};

// The largest slice `config` makes of a plan with buckets of `bucketBytes`.
std::uint64_t maxSliceBytes(const NcclChannelConfig& config, std::uint64_t bucketBytes);

class NcclChannel final : public Channel {
 public:
  // Joins the communicator (every rank must call it, within `deadline`) on the current CUDA device.
  static tl::expected<std::unique_ptr<NcclChannel>, ChannelFailure> open(
      const NcclChannelConfig& config, std::chrono::steady_clock::time_point deadline);
  ~NcclChannel() override;
  NcclChannel(const NcclChannel&) = delete;
  NcclChannel& operator=(const NcclChannel&) = delete;

  msg::ChannelKind kind() const override { return msg::ChannelKind::Nccl; }
  TensorMemory tensorMemory() const override { return TensorMemory::Device; }
  void setCancelProbe(std::function<bool()> probe) override { cancel_ = std::move(probe); }
  const std::string& key() const override { return key_; }

  // `tensors` hold device addresses on this channel's device. send() reads them on its own streams: the caller
  // must have finished writing them (synchronised the stream that wrote them) before calling. `receiverCount` must
  // be worldSize - 1.
  tl::expected<TransferResult, ChannelFailure> send(std::uint64_t transfer, const BucketPlan& plan,
                                                    std::span<const std::span<const std::byte>> tensors,
                                                    std::uint32_t receiverCount,
                                                    std::chrono::steady_clock::time_point deadline) override;
  // `receiver` must be rank - 1. On success the bytes are in `tensors` and the device work is complete.
  tl::expected<TransferResult, ChannelFailure> receive(std::uint64_t transfer, const BucketPlan& plan,
                                                       std::span<const std::span<std::byte>> tensors,
                                                       std::uint32_t receiver,
                                                       std::chrono::steady_clock::time_point deadline) override;

  // Region rounds: the source of rank `source` and the receiver of rank sourceCount + `receiver`. Same contract as
  // send() and receive(): the caller has finished writing `buffers`; on success the bytes are in `locals`. Each side's
  // pair digests are the device checksum of every word of the pair's segments, folded by the pack and unpack copies.
  bool carriesRegions() const override { return true; }
  tl::expected<RegionTransferResult, ChannelFailure> sendRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
      std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) override;
  tl::expected<RegionTransferResult, ChannelFailure> receiveRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
      std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) override;

  // Broken once the communicator was aborted: every later transfer fails at once.
  ChannelState state() const override;
  std::int32_t rank() const { return config_.rank; }
  ChannelMemory memory() const override;
  // The last successful transfer's slices on this rank, with config.timeline; empty without it.
  const std::vector<NcclSliceTiming>& timeline() const;
  // The last successful transfer's host times on this rank, with config.timeline.
  const NcclHostTiming& hostTiming() const;

  struct State;

 private:
  using Clock = std::chrono::steady_clock;

  NcclChannel(NcclChannelConfig config, std::unique_ptr<State> state);

  // The steps of a transfer, both sides, in the order run() takes them. A step's failure aborts the communicator
  // (the other ranks would otherwise wait for this one), except finish()'s, which comes after the device is done.
  template <typename Byte>
  tl::expected<TransferResult, ChannelFailure> run(const BucketPlan& plan, std::span<const std::span<Byte>> tensors,
                                                   Clock::time_point deadline);
  // 1. The layout: each slice's route and the copy table, rebuilt only when the plan or the tensors changed.
  template <typename Byte>
  tl::expected<void, ChannelFailure> layOut(const BucketPlan& plan, std::span<const std::span<Byte>> tensors);
  // ... the staging buffers and the events the slices need, allocated where there are fewer or smaller;
  tl::expected<void, ChannelFailure> allocate(const std::vector<BroadcastSlice>& slices);
  // ... each slice's route (direct or through which buffer) and its copy batch, the table uploaded.
  template <typename Byte>
  tl::expected<void, ChannelFailure> route(const BucketPlan& plan, const std::vector<BroadcastSlice>& slices,
                                           std::span<const std::span<Byte>> tensors);
  // 2. The whole transfer onto the streams, ordered by events, without waiting on the device; the guard watches
  // every blocking NCCL call of it.
  tl::expected<void, ChannelFailure> enqueue(Clock::time_point deadline);
  tl::expected<void, ChannelFailure> enqueueSlices(Clock::time_point deadline);
  // ... a sender's slice: packed (staged) or checksummed (direct), then broadcast;
  tl::expected<void, ChannelFailure> enqueueSend(std::size_t slice, Clock::time_point deadline);
  // ... a receiver's slice: broadcast, then unpacked or checksummed;
  tl::expected<void, ChannelFailure> enqueueReceive(std::size_t slice, Clock::time_point deadline);
  // ... the slice's copy on the copy stream, with the kernel blocks copyBlocks gives it;
  tl::expected<void, ChannelFailure> copy(std::size_t slice);
  std::uint32_t copyBlocks(std::size_t slice) const;
  // ... the slice's broadcast on the comm stream: blocking under the guard, or settled by polling.
  tl::expected<void, ChannelFailure> broadcast(std::size_t slice, Clock::time_point deadline);
  // 3. The watchdog, until every stream's work is done: progress is a slice (a region step) finishing on this rank.
  struct WatchedTransfer {
    std::size_t slices = 0;                             // each done at its sliceDone event
    std::function<std::uint64_t(std::size_t)> payload;  // the tensor bytes of a slice
    std::function<std::string(std::size_t)> done;       // how far the transfer got, for a failure's text
    const char* call = "";                              // what a slice is, in that text
  };
  tl::expected<void, ChannelFailure> watch(const WatchedTransfer& transfer, Clock::time_point deadline);
  // ... what ends the transfer at one look, if anything: a CUDA or NCCL error, a cancel, the deadline, a stall.
  std::optional<ChannelFailure> whyStop(const WatchedTransfer& transfer, std::size_t nextSlice,
                                        Clock::time_point lastProgress, Clock::time_point deadline) const;
  // 4. The timeline read back and the digest finished.
  tl::expected<TransferResult, ChannelFailure> finish();

  // A region transfer (nccl_regions.cpp), both sides: `self` is the source's or receiver's index, `buffers` its held
  // regions' buffers or its local tensors.
  template <typename Byte>
  tl::expected<RegionTransferResult, ChannelFailure> runRegions(const RegionPlan& plan, bool sending,
                                                                std::uint32_t self,
                                                                std::span<const std::span<Byte>> buffers,
                                                                Clock::time_point deadline);
  // 1. The steps, their staging, sums and copy table, rebuilt only when the plan, this side or its buffers changed.
  template <typename Byte>
  tl::expected<void, ChannelFailure> layOutRegions(const RegionPlan& plan, bool sending, std::uint32_t self,
                                                   std::span<const std::span<Byte>> buffers);
  tl::expected<void, ChannelFailure> allocateRegions(std::size_t peers);
  // 2. Every step onto the streams: packs, then the step's sends as one group (source); the group's receives, then
  // unpacks (receiver).
  tl::expected<void, ChannelFailure> enqueueRegions(const RegionPlan& plan, bool sending, Clock::time_point deadline);
  tl::expected<void, ChannelFailure> copyStep(std::size_t step, bool sending);
  tl::expected<void, ChannelFailure> moveStep(std::size_t step, const RegionPlan& plan, bool sending,
                                              Clock::time_point deadline);
  // 3. watch(), then each pair's result from its sums.
  tl::expected<RegionTransferResult, ChannelFailure> finishRegions(const RegionPlan& plan, bool sending,
                                                                   std::uint32_t self);

  NcclChannelConfig config_;
  std::string key_;
  std::function<bool()> cancel_;
  std::unique_ptr<State> state_;
};

}  // namespace wsync::bus::gpu
