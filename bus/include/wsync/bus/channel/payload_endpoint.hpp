#pragma once
// One agent's end of the payload plane, the same for trainers and workers: the channel a TransferPlan names,
// opened once and kept while its key and the registration hold (one open channel per kind: a new key replaces the
// old one, so an old NCCL communicator is released before the new one is built, and each passes through the agent's
// fault hook, where a test may decorate it: FaultHook::decorateChannel); the bucket plan, built once per
// manifest and geometry and checked against the coordinator's before a byte moves; the cancel probe (the
// coordinator ended the round, or died); the agent's progress in its control-block slot.
//
// A transfer is prepare() (everything that can fail before a byte moves) then send() or receive().
// Threading: the agent's I/O thread only.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/region_declarations.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/fault_hook.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/state/coordinator_watch.hpp"

namespace wsync::bus {

// Why a transfer could not be done, as the agent reports it in UpdateDone.
struct PayloadFailure {
  msg::AbortReason reason = msg::AbortReason::ChannelFailure;
  FailureCause cause = FailureCause::Local;
  std::string detail;
};

// A transfer ready to run: valid until the next prepare() or reset().
struct PreparedTransfer {
  Channel* channel = nullptr;  // null: nothing to move (no receivers)
  const BucketPlan* buckets = nullptr;
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  std::uint64_t totalBytes = 0;
  std::int32_t receiver = -1;  // this agent's receiver index; -1 for the sender
  std::uint32_t receiverCount = 0;
  // A region round (docs/regions.md): the plan every agent computes, and this agent's source index (-1: a receiver).
  std::shared_ptr<const RegionPlan> regions;
  std::int32_t source = -1;
};

// How an endpoint opens the channel a plan names: openChannel (registry.hpp), or a test channel in unit tests.
using ChannelOpener = std::function<tl::expected<std::unique_ptr<Channel>, ChannelFailure>(const msg::TransferPlan&,
                                                                                           const ChannelSetup&)>;

class PayloadEndpoint {
 public:
  // `transferDeadline`: how long one transfer (and the opening of its channel) may take. `faultHook`: the agent's
  // (test only; none in production), which must outlive this endpoint. `listeners`: what the agent opened before its
  // hello for the channels it sends on (openChannelListeners), passed to every channel it opens; none for a receiver.
  PayloadEndpoint(AgentSession& session, int cudaDevice, std::chrono::milliseconds transferDeadline,
                  ChannelOpener opener = openChannel, FaultHook* faultHook = nullptr,
                  std::shared_ptr<ChannelListeners> listeners = {});
  ~PayloadEndpoint();
  PayloadEndpoint(const PayloadEndpoint&) = delete;
  PayloadEndpoint& operator=(const PayloadEndpoint&) = delete;

  // Checks `plan` against `manifest` (bucket count and bytes) and opens or reuses its channel. `memory`, when given,
  // is where the agent's tensors are: a channel moving the other kind is refused. A plan with no receivers needs no
  // channel: send() then moves nothing.
  tl::expected<PreparedTransfer, PayloadFailure> prepare(const msg::TransferPlan& plan, const Manifest& manifest,
                                                         std::optional<TensorMemory> memory);
  // `progress` (optional) gets the bytes done after each bucket, after the slot has them. `allocationsKept`: the
  // caller's word for Channel::setAllocationsKept; `layoutToken`: its name for `tensors` (Channel::setLayoutToken;
  // 0 names nothing).
  tl::expected<TransferResult, PayloadFailure> send(const PreparedTransfer& transfer,
                                                    std::span<const std::span<const std::byte>> tensors,
                                                    bool allocationsKept, std::uint64_t layoutToken,
                                                    const TransferProgress& progress);
  tl::expected<TransferResult, PayloadFailure> receive(const PreparedTransfer& transfer,
                                                       std::span<const std::span<std::byte>> tensors,
                                                       std::uint64_t layoutToken, const TransferProgress& progress);

  // A region round's (TransferPlan regions): the plan from the declarations this agent holds, then the channel.
  // `memory` as for prepare().
  tl::expected<PreparedTransfer, PayloadFailure> prepareRegions(const msg::TransferPlan& plan, const Manifest& manifest,
                                                                std::optional<TensorMemory> memory);
  // A source: sends its segments from `buffers` (indexed like its holdings' regions); per receiver.
  tl::expected<RegionTransferResult, PayloadFailure> sendRegions(const PreparedTransfer& transfer,
                                                                 std::span<const std::span<const std::byte>> buffers,
                                                                 const TransferProgress& progress);
  // A receiver: fills `locals` (indexed like its bindings' local tensors) from every source; per source.
  tl::expected<RegionTransferResult, PayloadFailure> receiveRegions(const PreparedTransfer& transfer,
                                                                    std::span<const std::span<std::byte>> locals,
                                                                    const TransferProgress& progress);
  // The holdings and bindings the coordinator sent this agent, and its own (RegionDeclarations).
  RegionDeclarations& declarations() { return declarations_; }

  // A peer taking part may have died (an abort for AgentDied): let go of what the channels hold of it.
  void releasePeers();
  // The registration ended (a lost link, a new coordinator): what was opened belongs to rounds that are over.
  void reset();

 private:
  struct OpenChannel {
    std::unique_ptr<Channel> channel;
    std::uint64_t epoch = 0;  // the coordinator's, at opening: a restarted one recreates its segments
  };
  struct CachedBuckets {
    Digest manifest;
    std::uint64_t bucketBytes = 0;
    std::uint32_t alignment = 0;
    BucketPlan plan;
  };

  tl::expected<Channel*, PayloadFailure> channelFor(const msg::TransferPlan& plan, std::optional<TensorMemory> memory);
  tl::expected<const BucketPlan*, PayloadFailure> bucketsFor(const msg::TransferPlan& plan, const Manifest& manifest);
  // True once the coordinator has left the transfer phase of `round` (aborted it), died, or the link was lost.
  bool roundEnded(std::uint64_t round);
  void begin(const PreparedTransfer& transfer, AgentPhase phase, const TransferProgress& progress);
  void finish(const PreparedTransfer& transfer);
  PayloadFailure failure(const ChannelFailure& error) const;

  AgentSession& session_;
  const ChannelOpener opener_;
  FaultHook* const faultHook_;
  const std::shared_ptr<ChannelListeners> listeners_;
  const int cudaDevice_;
  const std::chrono::milliseconds transferDeadline_;
  CoordinatorWatch coordinatorWatch_;
  std::map<msg::ChannelKind, OpenChannel> channels_;
  std::deque<CachedBuckets> buckets_;  // newest first, at most kCachedBucketPlans
  RegionDeclarations declarations_;
};

}  // namespace wsync::bus
