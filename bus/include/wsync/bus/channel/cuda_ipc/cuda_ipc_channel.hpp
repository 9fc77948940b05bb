#pragma once
// The cuda_ipc channel (docs/gpu-channels.md): sender and receivers on one host, on the same GPU or on GPUs that
// can reach each other. Nothing is staged: the sender exports the cudaMalloc blocks its tensors live in (once, and
// again only when a tensor moves), the table of handles and tensor offsets sits in the channel's shared-memory
// segment, and each receiver opens the handles once and keeps them across rounds. A transfer is then one kernel
// launch per receiver that copies every tensor from the sender's memory into the receiver's, folding the digest
// in, with no per-tensor handle traffic and no extra GPU memory beyond a table of 48 bytes a tensor. The sender
// exports again only when a tensor moved or its block was freed and allocated anew (the driver's buffer id
// changes even at the same address); receivers then close the handles no longer named before opening new ones.
//
// Digests: the receivers compute them while copying; the sender does not read its tensors a second time (on one
// GPU that would cost half again the copy's memory traffic). Instead send() waits for every receiver and succeeds
// only if all of them report the same digest, which it returns: a receiver that read torn or stale bytes shows.
//
// The sender's tensors must stay unchanged from send() until it returns: receivers read them in place.
// Memory from cudaMallocAsync pools or from the virtual memory API (PyTorch's expandable_segments) cannot be
// exported this way: send() fails naming the tensor.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>
#include <tl/expected.hpp>

#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_data.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_timing.hpp"
#include "wsync/bus/channel/device_checksum.hpp"
#include "wsync/bus/channel/gpu/gpu_runtime.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"

namespace wsync::bus::gpu {
namespace detail {
struct CopyReport;   // bus/src/channel/gpu/copy_kernel.hpp
class CopyReporter;  // bus/src/channel/gpu/copy_reporter.hpp
}  // namespace detail

struct IpcGeometry {
  std::uint32_t maxReceivers = 8;
  std::uint32_t maxAllocations = 1U << 16;  // 5 MiB of table
  std::uint32_t maxTensors = 1U << 18;      // 6 MiB of table
};

// The owner's side: creates the segment (mode 0600; one left by a dead owner is replaced) and removes it when
// destroyed. abort() makes everyone waiting on `transfer` give up.
class CudaIpcSegment {
 public:
  static tl::expected<std::unique_ptr<CudaIpcSegment>, ChannelFailure> create(const std::string& name,
                                                                              const IpcGeometry& geometry);
  ~CudaIpcSegment();
  CudaIpcSegment(const CudaIpcSegment&) = delete;
  CudaIpcSegment& operator=(const CudaIpcSegment&) = delete;

  const std::string& name() const { return name_; }
  void abort(std::uint64_t transfer);

 private:
  CudaIpcSegment(boost::interprocess::mapped_region region, std::string name)
      : region_(std::move(region)), name_(std::move(name)) {}
  boost::interprocess::mapped_region region_;
  std::string name_;
};

class CudaIpcChannel final : public Channel {
 public:
  // Maps the segment `name` on the current CUDA device (which must stay current on the calling thread).
  static tl::expected<std::unique_ptr<CudaIpcChannel>, ChannelFailure> open(const std::string& name);
  ~CudaIpcChannel() override;  // closes every opened handle
  CudaIpcChannel(const CudaIpcChannel&) = delete;
  CudaIpcChannel& operator=(const CudaIpcChannel&) = delete;

  msg::ChannelKind kind() const override { return msg::ChannelKind::CudaIpc; }
  TensorMemory tensorMemory() const override { return TensorMemory::Device; }
  void setCancelProbe(std::function<bool()> probe) override { cancel_ = std::move(probe); }
  const std::string& key() const override { return name_; }

  // Publishes `tensors` (device addresses) and waits until receivers 0..receiverCount-1 have copied them. The
  // caller must have finished writing them. Fails with DigestMismatch if the receivers disagree.
  tl::expected<TransferResult, ChannelFailure> send(std::uint64_t transfer, const BucketPlan& plan,
                                                    std::span<const std::span<const std::byte>> tensors,
                                                    std::uint32_t receiverCount,
                                                    std::chrono::steady_clock::time_point deadline) override;
  tl::expected<TransferResult, ChannelFailure> receive(std::uint64_t transfer, const BucketPlan& plan,
                                                       std::span<const std::span<std::byte>> tensors,
                                                       std::uint32_t receiver,
                                                       std::chrono::steady_clock::time_point deadline) override;

  // Region rounds (docs/gpu-channels.md, "Region rounds"; cuda_ipc_regions.cpp). Source s exports its buffers on a
  // segment of its own (cudaIpcSourceSegmentName) as a sender exports its tensors, checks the sample
  // (region_samples.hpp) of what each of its receivers takes from its own buffers, and waits until every receiver
  // it has segments for is done. A receiver opens the segment of every source it takes from (its handles kept across
  // rounds, as a receiver's are), copies every piece from every source in one launch, then checks the sample of what
  // landed in its local tensors, one small launch per source, and reports each source its pair's digest.
  bool carriesRegions() const override { return true; }
  tl::expected<RegionTransferResult, ChannelFailure> sendRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
      std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) override;
  tl::expected<RegionTransferResult, ChannelFailure> receiveRegions(
      std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
      std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) override;

  // This end's agent: a receiver writes it into its slot at each receive, so that the sender's faults name it by
  // agent id rather than by index alone. Empty (the default): named by index.
  void setAgentId(std::string agentId) { agentId_ = std::move(agentId); }
  // Closes the handles this receiver opened: call when the sender is gone (its memory is freed with it).
  void releaseImports();
  void releasePeers() override { releaseImports(); }
  // Handles this receiver holds open now (one per exported block it copies from).
  std::uint32_t openedHandles() const;
  // How many times senders exported their blocks into this segment: what a sender last wrote, or what a receiver
  // last imported. It stays at 1 while one trainer's tensors stay where they are; a trainer that replaces another
  // goes on counting from the last one's.
  std::uint64_t exportGeneration() const;
  ChannelMemory memory() const override;
  // The last send's or receive's instants (cuda_ipc_timing.hpp), set as far as it got.
  const IpcRoundTiming& lastTiming() const;
  // Profiling: time the receiver's copy kernel between CUDA events too (two event records a round).
  void setTimeline(bool on);
  // How long a side waiting for the other (the receiver for the sender's publish, the sender for the receivers'
  // copies) yields in a loop before it sleeps on the segment's futex: a futex wake-up costs tens of microseconds on
  // a VM, twice a round. 0 (the default): sleep at once. `wsync-bench gpu --ipc-spin-us` measures the difference.
  void setSpinWait(std::chrono::microseconds spin);

  struct State;
  struct RegionState;

 private:
  using Clock = std::chrono::steady_clock;
  using HandleBytes = std::array<std::uint8_t, kIpcHandleBytes>;

  CudaIpcChannel(boost::interprocess::mapped_region region, std::string name, std::unique_ptr<State> state);

  // The steps of send(), in order: export (when the tensors changed), publish, wait, compare.
  // 1. The tensors' blocks exported and the segment's tables written, when a tensor moved or a block was replaced.
  tl::expected<void, ChannelFailure> exportTensors(std::span<const std::span<const std::byte>> tensors);
  // 2. `receivers` done with `transfer`, or the first failure, abort, cancel or the deadline.
  tl::expected<void, ChannelFailure> waitForReceivers(std::uint64_t transfer, std::span<const std::uint32_t> receivers,
                                                      Clock::time_point deadline);
  // 3. The result every receiver agrees on, or DigestMismatch.
  tl::expected<TransferResult, ChannelFailure> agreedResult(std::uint64_t transfer, std::uint32_t receiverCount);

  // The steps of receive(), in order: wait, import (once per export), table (once per layout), copy, report.
  // 1. The sender has published `transfer`.
  tl::expected<void, ChannelFailure> waitForSender(std::uint64_t transfer, Clock::time_point deadline);
  // 2. The sender's export imported (handles opened once, kept across rounds): its generation.
  tl::expected<std::uint64_t, ChannelFailure> importExport();
  // ... a sender in this process on another GPU: peer access to it;
  tl::expected<void, ChannelFailure> reachSenderDevice();
  // ... each exported block's address here, opening the handles not yet open.
  tl::expected<std::vector<void*>, ChannelFailure> openImports(std::span<const HandleBytes> handles, bool sameProcess);
  // 3. The copy table from the export into `tensors`, rebuilt when the export or the tensors changed.
  tl::expected<void, ChannelFailure> buildTable(const BucketPlan& plan, std::span<const std::span<std::byte>> tensors,
                                                const Digest& tensorsKey, std::uint64_t generation);
  // 4. The copy: one kernel launch, which reports its own end to `report`.
  tl::expected<void, ChannelFailure> launchCopy(const detail::CopyReport& report);
  // The sums of `report`'s launch, reported to `reporter`, once it ended.
  tl::expected<DeviceChecksumSums, ChannelFailure> waitForCopy(const detail::CopyReporter& reporter,
                                                               const detail::CopyReport& report);
  // 5. Bytes and digest into this receiver's slot, the sender woken.
  tl::expected<TransferResult, ChannelFailure> reportCopy(IpcReceiverData& slot, std::uint64_t transfer,
                                                          const DeviceChecksumSums& sums);

  // Region rounds (cuda_ipc_regions.cpp). The channel on source `source`'s segment, opened at its first round.
  tl::expected<CudaIpcChannel*, ChannelFailure> linkOf(std::uint32_t source);
  // A source's table (RegionState): the checks of its receivers' samples in its buffers, uploaded.
  tl::expected<void, ChannelFailure> describeSourceChecks(const RegionPlan& plan, std::uint32_t source,
                                                          std::span<const std::span<const std::byte>> buffers,
                                                          std::span<const std::uint32_t> receivers);
  // A receiver's table: the copies from every source in `sources` (whose exports it imported) and the checks of what
  // lands, uploaded.
  tl::expected<void, ChannelFailure> describeReceiverCopies(const RegionPlan& plan, std::uint32_t receiver,
                                                            std::span<const std::span<std::byte>> locals,
                                                            std::span<const std::uint32_t> sources);
  // The sums of every check launched, in launch order.
  tl::expected<std::vector<DeviceChecksumSums>, ChannelFailure> waitForChecks(std::size_t count);

  boost::interprocess::mapped_region region_;
  std::string name_;
  std::function<bool()> cancel_;
  std::string agentId_;
  std::unique_ptr<State> state_;
  std::vector<std::unique_ptr<CudaIpcChannel>> links_;  // [source], opened as needed
  std::unique_ptr<RegionState> regions_;
};

// The segment of source `source` of a region round on the cuda_ipc channel whose segment is `segment`.
std::string cudaIpcSourceSegmentName(const std::string& segment, std::uint32_t source);

}  // namespace wsync::bus::gpu
