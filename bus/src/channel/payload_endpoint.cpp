#include "wsync/bus/channel/payload_endpoint.hpp"

#include <algorithm>

#include "wsync/bus/channel/registry.hpp"

namespace wsync::bus {

namespace {

// Plans kept: one per manifest and geometry an agent alternates between (a trainer publishing two models, a
// coordinator restarted with another bucket size). Building one is a pass over the manifest.
constexpr std::size_t kCachedBucketPlans = 4;

PayloadFailure localFailure(std::string detail) {
  return PayloadFailure{msg::AbortReason::ChannelFailure, FailureCause::Local, std::move(detail)};
}

}  // namespace

PayloadEndpoint::PayloadEndpoint(AgentSession& session, int cudaDevice, std::chrono::milliseconds transferDeadline,
                                 ChannelOpener opener, FaultHook* faultHook,
                                 std::shared_ptr<ChannelListeners> listeners)
    : session_(session),
      opener_(std::move(opener)),
      faultHook_(faultHook),
      listeners_(std::move(listeners)),
      cudaDevice_(cudaDevice),
      transferDeadline_(transferDeadline) {}

PayloadEndpoint::~PayloadEndpoint() = default;

bool PayloadEndpoint::roundEnded(std::uint64_t round) {
  // A lost connection took the registration, and the round with it.
  if (!session_.registered()) return true;
  const RoundState state = session_.slot().roundState();
  // A coordinator killed mid-transfer can abort nothing: without this the transfer would wait for its deadline
  // (minutes) on a peer that may never have been sent its plan (the fault matrix found it).
  if (coordinatorWatch_.gone(session_.slot())) return true;
  // On another host the round's phase comes from the coordinator's beats, which may arrive after the plan did: a
  // view that has not reached this round's transfer yet is behind, not over (on the coordinator's host the block
  // is written before the plan is sent, and this never holds).
  const bool behind =
      state.round < round ||
      (state.round == round && (state.phase == msg::RoundPhase::Begin || state.phase == msg::RoundPhase::Pause));
  return !behind && (state.round != round || state.phase != msg::RoundPhase::Transfer);
}

PayloadFailure PayloadEndpoint::failure(const ChannelFailure& error) const {
  // A peer that stalled timed the round out; one whose connection closed failed the channel (the coordinator learns
  // from its heartbeats whether it died).
  const msg::AbortReason reason =
      error.code == ChannelError::Timeout ? msg::AbortReason::Timeout : msg::AbortReason::ChannelFailure;
  return PayloadFailure{reason, causeOf(error.code), error.describe()};
}

tl::expected<const BucketPlan*, PayloadFailure> PayloadEndpoint::bucketsFor(const msg::TransferPlan& plan,
                                                                            const Manifest& manifest) {
  const Digest digest = manifest.digest();
  auto cached = std::find_if(buckets_.begin(), buckets_.end(), [&](const CachedBuckets& entry) {
    return entry.manifest == digest && entry.bucketBytes == plan.bucket_bytes() && entry.alignment == plan.alignment();
  });
  if (cached == buckets_.end()) {
    auto built = BucketPlan::build(manifest, plan.bucket_bytes(), plan.alignment());
    if (!built) return tl::unexpected(localFailure("bucket plan: " + built.error().describe()));
    if (buckets_.size() >= kCachedBucketPlans) buckets_.pop_back();
    buckets_.push_front(CachedBuckets{digest, plan.bucket_bytes(), plan.alignment(), std::move(*built)});
    cached = buckets_.begin();
  }
  // The plan is a pure function of these numbers, so a disagreement means a different manifest or build: better
  // to fail here, naming both sides, than to move bytes into the wrong places.
  if (cached->plan.bucketCount() != plan.bucket_count() || manifest.totalBytes() != plan.total_bytes()) {
    return tl::unexpected(localFailure("the coordinator plans " + std::to_string(plan.bucket_count()) + " buckets of " +
                                       std::to_string(plan.total_bytes()) + " bytes, this agent computes " +
                                       std::to_string(cached->plan.bucketCount()) + " of " +
                                       std::to_string(manifest.totalBytes())));
  }
  return &cached->plan;
}

tl::expected<Channel*, PayloadFailure> PayloadEndpoint::channelFor(const msg::TransferPlan& plan,
                                                                   std::optional<TensorMemory> memory) {
  const std::uint64_t epoch = session_.registration().epoch;
  const std::uint64_t round = plan.round();
  auto probe = [this, round] { return roundEnded(round); };
  auto open = channels_.find(plan.channel());
  if (open != channels_.end()) {
    Channel& channel = *open->second.channel;
    if (channel.state() == ChannelState::Usable && channel.key() == channelKey(plan) && open->second.epoch == epoch) {
      channel.setCancelProbe(probe);
      return &channel;
    }
    channels_.erase(open);  // released before its successor is built (one NCCL communicator at a time)
  }
  ChannelSetup setup;
  setup.cudaDevice = cudaDevice_;
  setup.cancelProbe = probe;
  setup.deadline = std::chrono::steady_clock::now() + transferDeadline_;
  setup.listeners = listeners_;
  setup.agentId = session_.options().agentId;
  auto opened = opener_(plan, setup);
  if (!opened) {
    return tl::unexpected(localFailure("cannot open the payload channel: " + opened.error().describe()));
  }
  if (memory && (*opened)->tensorMemory() != *memory) {
    const bool device = (*opened)->tensorMemory() == TensorMemory::Device;
    return tl::unexpected(localFailure("channel " + channelName(plan.channel()) +
                                       (device ? " moves device memory and this agent's tensors are host memory"
                                               : " moves host memory and this agent's tensors are device memory")));
  }
  if (faultHook_ != nullptr) faultHook_->decorateChannel(*opened);
  OpenChannel& slot = channels_[plan.channel()];
  slot = OpenChannel{std::move(*opened), epoch};
  return slot.channel.get();
}

tl::expected<PreparedTransfer, PayloadFailure> PayloadEndpoint::prepare(const msg::TransferPlan& plan,
                                                                        const Manifest& manifest,
                                                                        std::optional<TensorMemory> memory) {
  auto buckets = bucketsFor(plan, manifest);
  if (!buckets) return tl::unexpected(buckets.error());
  PreparedTransfer transfer;
  transfer.buckets = *buckets;
  transfer.round = plan.round();
  transfer.version = plan.version();
  transfer.totalBytes = manifest.totalBytes();
  transfer.receiver = plan.receiver();
  transfer.receiverCount = plan.receiver_count();
  // Nobody to move to: the coordinator made no channel resources for the round, and the version counts as sent.
  if (transfer.receiverCount == 0) return transfer;
  auto channel = channelFor(plan, memory);
  if (!channel) return tl::unexpected(channel.error());
  transfer.channel = *channel;
  return transfer;
}

void PayloadEndpoint::begin(const PreparedTransfer& transfer, AgentPhase phase, const TransferProgress& progress) {
  if (session_.registered()) {
    session_.slot().setPhase(phase);
    session_.slot().setTransferProgress(transfer.round, 0);
  }
  transfer.channel->setProgress([this, round = transfer.round, &progress](std::uint64_t bytes) {
    if (session_.registered()) session_.slot().setTransferProgress(round, bytes);
    if (progress) progress(bytes);
  });
}

void PayloadEndpoint::finish(const PreparedTransfer& transfer) {
  transfer.channel->setProgress({});
  // A channel that failed for good (an aborted communicator) is dropped now: its successor comes with new resources.
  if (transfer.channel->state() == ChannelState::Broken) {
    std::erase_if(channels_, [&](const auto& entry) { return entry.second.channel.get() == transfer.channel; });
  }
}

tl::expected<TransferResult, PayloadFailure> PayloadEndpoint::send(const PreparedTransfer& transfer,
                                                                   std::span<const std::span<const std::byte>> tensors,
                                                                   bool allocationsKept, std::uint64_t layoutToken,
                                                                   const TransferProgress& progress) {
  if (transfer.channel == nullptr) return TransferResult{transfer.totalBytes, Digest{}};
  begin(transfer, AgentPhase::Sending, progress);
  transfer.channel->setAllocationsKept(allocationsKept);
  transfer.channel->setLayoutToken(layoutToken);
  auto sent = transfer.channel->send(transfer.round, *transfer.buckets, tensors, transfer.receiverCount,
                                     std::chrono::steady_clock::now() + transferDeadline_);
  finish(transfer);
  if (!sent) return tl::unexpected(failure(sent.error()));
  return *sent;
}

tl::expected<TransferResult, PayloadFailure> PayloadEndpoint::receive(const PreparedTransfer& transfer,
                                                                      std::span<const std::span<std::byte>> tensors,
                                                                      std::uint64_t layoutToken,
                                                                      const TransferProgress& progress) {
  if (transfer.channel == nullptr || transfer.receiver < 0) {
    return tl::unexpected(localFailure("the plan gives this agent no receiver index"));
  }
  begin(transfer, AgentPhase::Receiving, progress);
  transfer.channel->setLayoutToken(layoutToken);
  auto received = transfer.channel->receive(transfer.round, *transfer.buckets, tensors,
                                            static_cast<std::uint32_t>(transfer.receiver),
                                            std::chrono::steady_clock::now() + transferDeadline_);
  finish(transfer);
  if (!received) return tl::unexpected(failure(received.error()));
  return *received;
}

tl::expected<PreparedTransfer, PayloadFailure> PayloadEndpoint::prepareRegions(const msg::TransferPlan& plan,
                                                                               const Manifest& manifest,
                                                                               std::optional<TensorMemory> memory) {
  auto refuse = [](std::string detail) {
    return tl::unexpected(PayloadFailure{msg::AbortReason::ManifestMismatch, FailureCause::Local, std::move(detail)});
  };
  if (!plan.regions()) return refuse("the plan is not of a region round");
  auto regions = declarations_.planFor(plan, manifest);
  if (!regions) return refuse("region plan: " + regions.error());
  const RegionPlan& planned = **regions;
  if (planned.receiverCount() != plan.receiver_count() ||
      (plan.source() >= 0 && static_cast<std::uint32_t>(plan.source()) >= planned.sourceCount()) ||
      (plan.receiver() >= 0 && static_cast<std::uint32_t>(plan.receiver()) >= planned.receiverCount()) ||
      (plan.source() < 0) == (plan.receiver() < 0)) {
    return refuse("the plan names source " + std::to_string(plan.source()) + " and receiver " +
                  std::to_string(plan.receiver()) + " of " + std::to_string(planned.sourceCount()) + " sources and " +
                  std::to_string(plan.receiver_count()) + " receivers, and the declarations have " +
                  std::to_string(planned.receiverCount()) + " receivers");
  }
  PreparedTransfer transfer;
  transfer.round = plan.round();
  transfer.version = plan.version();
  transfer.totalBytes = manifest.totalBytes();
  transfer.receiver = plan.receiver();
  transfer.receiverCount = plan.receiver_count();
  transfer.source = plan.source();
  transfer.regions = std::move(*regions);
  // Nobody to move to: the coordinator made no channel resources for the round, and the version counts as sent.
  if (transfer.receiverCount == 0) return transfer;
  auto channel = channelFor(plan, memory);
  if (!channel) return tl::unexpected(channel.error());
  if (!(*channel)->carriesRegions()) {
    return tl::unexpected(localFailure("channel " + channelName(plan.channel()) + " carries no region rounds"));
  }
  transfer.channel = *channel;
  return transfer;
}

tl::expected<RegionTransferResult, PayloadFailure> PayloadEndpoint::sendRegions(
    const PreparedTransfer& transfer, std::span<const std::span<const std::byte>> buffers,
    const TransferProgress& progress) {
  if (transfer.regions == nullptr || transfer.source < 0) {
    return tl::unexpected(localFailure("the plan gives this agent no source index"));
  }
  if (transfer.channel == nullptr) return RegionTransferResult{};
  begin(transfer, AgentPhase::Sending, progress);
  auto sent =
      transfer.channel->sendRegions(transfer.round, *transfer.regions, static_cast<std::uint32_t>(transfer.source),
                                    buffers, std::chrono::steady_clock::now() + transferDeadline_);
  finish(transfer);
  if (!sent) return tl::unexpected(failure(sent.error()));
  return *sent;
}

tl::expected<RegionTransferResult, PayloadFailure> PayloadEndpoint::receiveRegions(
    const PreparedTransfer& transfer, std::span<const std::span<std::byte>> locals, const TransferProgress& progress) {
  if (transfer.regions == nullptr || transfer.channel == nullptr || transfer.receiver < 0) {
    return tl::unexpected(localFailure("the plan gives this agent no receiver index"));
  }
  begin(transfer, AgentPhase::Receiving, progress);
  auto received =
      transfer.channel->receiveRegions(transfer.round, *transfer.regions, static_cast<std::uint32_t>(transfer.receiver),
                                       locals, std::chrono::steady_clock::now() + transferDeadline_);
  finish(transfer);
  if (!received) return tl::unexpected(failure(received.error()));
  return *received;
}

void PayloadEndpoint::releasePeers() {
  for (auto& [kind, open] : channels_) open.channel->releasePeers();
}

void PayloadEndpoint::reset() { channels_.clear(); }

}  // namespace wsync::bus
