// Region rounds on the nccl channel (docs/gpu-channels.md, "Region rounds on nccl"): each pair's pieces point to
// point, in steps (region_steps.hpp). A source packs step k's chunks, one per receiver, from its buffers into a
// staging buffer and sends them as one NCCL group; a receiver takes step k's chunks, one per source, as one group and
// unpacks them into its local tensors. The packs and unpacks fold the device checksum of every word they copy, keyed
// by segment, into one sum per pair: both ends of a pair fold the same words, so the coordinator's pair check
// compares what a receiver took with what its source read, every byte of it. Steps take the staging buffers in
// turn, as the broadcasts' slices do, so a source packs step k + 1 while step k is on the wire and a receiver unpacks
// step k while k + 1 arrives; the host enqueues every step, then watches them like a broadcast's slices.
#include <algorithm>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "channel/nccl/nccl_state.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus::gpu {

NcclRegionState::~NcclRegionState() {
  for (void* buffer : buffers) {
    if (buffer != nullptr) cudaFree(buffer);
  }
  if (deviceSums != nullptr) cudaFree(deviceSums);
  if (hostSums != nullptr) cudaFreeHost(hostSums);
}

namespace {

// The key of a region layout: the plan, this side, its buffers and the step size.
Digest regionKeyOf(const RegionPlan& plan, bool sending, std::uint32_t self, const Digest& buffers,
                   std::uint64_t stepBytes) {
  StreamDigest digest;
  digest.add(&plan.digest(), sizeof(Digest));
  const std::uint64_t side[] = {sending ? 1U : 0U, self, stepBytes};
  digest.add(side, sizeof side);
  digest.add(&buffers, sizeof buffers);
  return digest.digest();
}

std::uint64_t regionStepBytes(const NcclChannelConfig& config) {
  const std::uint64_t bytes = config.regionStepBytes != 0 ? config.regionStepBytes : kNcclDefaultRegionStepBytes;
  return std::max(bytes / kPairStreamAlignment * kPairStreamAlignment, kPairStreamAlignment);
}

}  // namespace

template <typename Byte>
tl::expected<RegionTransferResult, ChannelFailure> NcclChannel::runRegions(const RegionPlan& plan, bool sending,
                                                                           std::uint32_t self,
                                                                           std::span<const std::span<Byte>> buffers,
                                                                           Clock::time_point deadline) {
  State& state = *state_;
  if (state.broken) return fail(ChannelError::CommunicatorError, "the communicator was aborted; open a new channel");
  const std::uint32_t rank = sending ? self : plan.sourceCount() + self;
  if (plan.sourceCount() + plan.receiverCount() != config_.worldSize ||
      static_cast<std::int32_t>(rank) != config_.rank) {
    return fail(ChannelError::InvalidGeometry,
                std::string(sending ? "source " : "receiver ") + std::to_string(self) + " of " +
                    std::to_string(plan.sourceCount()) + " sources and " + std::to_string(plan.receiverCount()) +
                    " receivers is rank " + std::to_string(rank) + ", this channel's rank is " +
                    std::to_string(config_.rank) + " of " + std::to_string(config_.worldSize));
  }
  WSYNC_CUDA_TRY(cudaSetDevice(state.device));
  auto failed = [&state](ChannelFailure failure) -> tl::expected<RegionTransferResult, ChannelFailure> {
    // The peers would wait for this rank until their stall timeout: abort, so that their watchdogs see it at once.
    state.abort();
    return tl::unexpected(std::move(failure));
  };
  if (auto laidOut = layOutRegions(plan, sending, self, buffers); !laidOut) return failed(laidOut.error());
  const NcclRegionState& regions = *state.regions;
  if (regions.steps->steps().empty()) return finishRegions(plan, sending, self);  // nothing to move with anyone
  if (auto enqueued = enqueueRegions(plan, sending, deadline); !enqueued) return failed(enqueued.error());
  const std::vector<RegionStep>& steps = regions.steps->steps();
  const WatchedTransfer watched{
      .slices = steps.size(),
      .payload =
          [&](std::size_t step) {
            std::uint64_t payload = 0;
            for (const StepChunk& chunk : regions.steps->chunksOf(steps[step])) payload += chunk.payload;
            return payload;
          },
      .done = [&](std::size_t next) { return std::to_string(next) + " of " + std::to_string(steps.size()) + " steps"; },
      .call = sending ? "send step" : "receive step"};
  if (auto done = watch(watched, deadline); !done) return failed(done.error());
  return finishRegions(plan, sending, self);
}

template <typename Byte>
tl::expected<void, ChannelFailure> NcclChannel::layOutRegions(const RegionPlan& plan, bool sending, std::uint32_t self,
                                                              std::span<const std::span<Byte>> buffers) {
  State& state = *state_;
  if (!state.regions) state.regions = std::make_unique<NcclRegionState>();
  NcclRegionState& regions = *state.regions;
  const std::uint64_t stepBytes = regionStepBytes(config_);
  const Digest key = regionKeyOf(plan, sending, self, layoutKeyOf(buffers), stepBytes);
  if (regions.key == key) return {};
  regions.key.reset();
  regions.steps =
      sending ? RegionSteps::forSource(plan, self, stepBytes) : RegionSteps::forReceiver(plan, self, stepBytes);
  const RegionSteps& steps = *regions.steps;
  if (auto allocated = allocateRegions(steps.peers().size()); !allocated) return allocated;
  regions.sumsOf.assign(sending ? plan.receiverCount() : plan.sourceCount(), NcclRegionState::kNoPeer);
  for (std::size_t at = 0; at < steps.peers().size(); ++at)
    regions.sumsOf[steps.peers()[at]] = static_cast<std::uint32_t>(at);
  // One batch a chunk: each folds into its own pair's sums.
  regions.table.clear();
  regions.chunkBatch.clear();
  for (std::size_t step = 0; step < steps.steps().size(); ++step) {
    const auto slot = reinterpret_cast<std::uint64_t>(regions.buffers[step % regions.buffers.size()]);
    for (const StepChunk& chunk : steps.chunksOf(steps.steps()[step])) {
      regions.chunkBatch.push_back(regions.table.batchCount());
      regions.table.beginBatch();
      for (const StagedPiece& piece : steps.piecesOf(chunk)) {
        const auto tensor = reinterpret_cast<std::uint64_t>(buffers[piece.buffer].data()) + piece.offset;
        const std::uint64_t staged = slot + chunk.staged + piece.staged;
        regions.table.add(sending ? tensor : staged, sending ? staged : tensor, piece.bytes, piece.segment,
                          piece.firstWord * 8);
      }
    }
  }
  if (auto uploaded = regions.table.upload(); !uploaded) return uploaded;
  regions.key = key;
  return {};
}

tl::expected<void, ChannelFailure> NcclChannel::allocateRegions(std::size_t peers) {
  State& state = *state_;
  NcclRegionState& regions = *state.regions;
  const std::uint64_t staging = regions.steps->maxStagedBytes();
  if (regions.bufferBytes < staging) {
    for (void*& buffer : regions.buffers) {
      if (buffer != nullptr) cudaFree(buffer);
    }
    regions.buffers.assign(config_.bufferCount, nullptr);
    regions.bufferBytes = 0;
    for (void*& buffer : regions.buffers) {
      if (const cudaError_t error = cudaMalloc(&buffer, staging); error != cudaSuccess) {
        return tl::unexpected(detail::cudaFailure("cudaMalloc (region staging buffer)", error));
      }
    }
    regions.bufferBytes = staging;
  }
  if (regions.sumsCapacity < peers) {
    if (regions.deviceSums != nullptr) cudaFree(regions.deviceSums);
    if (regions.hostSums != nullptr) cudaFreeHost(regions.hostSums);
    regions.deviceSums = nullptr;
    regions.hostSums = nullptr;
    regions.sumsCapacity = 0;
    WSYNC_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&regions.deviceSums), peers * sizeof(DeviceChecksumSums)));
    WSYNC_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&regions.hostSums), peers * sizeof(DeviceChecksumSums)));
    regions.sumsCapacity = peers;
  }
  for (auto* events : {&state.sliceReady, &state.sliceDone}) {
    while (events->size() < regions.steps->steps().size()) {
      cudaEvent_t event = nullptr;
      if (const cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); error != cudaSuccess) {
        return tl::unexpected(detail::cudaFailure("cudaEventCreate", error));
      }
      events->push_back(event);
    }
  }
  return {};
}

tl::expected<void, ChannelFailure> NcclChannel::enqueueRegions(const RegionPlan& plan, bool sending,
                                                               Clock::time_point deadline) {
  State& state = *state_;
  const NcclRegionState& regions = *state.regions;
  const std::size_t peers = regions.steps->peers().size();
  if (state.guard) state.guard->watch(deadline, config_.stallTimeout, &cancel_);
  auto enqueued = [&]() -> tl::expected<void, ChannelFailure> {
    WSYNC_CUDA_TRY(cudaMemsetAsync(regions.deviceSums, 0, peers * sizeof(DeviceChecksumSums), state.copyStream));
    for (std::size_t step = 0; step < regions.steps->steps().size(); ++step) {
      const std::size_t slot = step % regions.buffers.size();
      if (sending) {
        WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.copyStream, state.bufferFree[slot], 0));
        if (auto packed = copyStep(step, sending); !packed) return packed;
        WSYNC_CUDA_TRY(cudaEventRecord(state.sliceReady[step], state.copyStream));
        WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.commStream, state.sliceReady[step], 0));
        if (auto sent = moveStep(step, plan, sending, deadline); !sent) return sent;
        WSYNC_CUDA_TRY(cudaEventRecord(state.bufferFree[slot], state.commStream));
        WSYNC_CUDA_TRY(cudaEventRecord(state.sliceDone[step], state.commStream));
      } else {
        WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.commStream, state.bufferFree[slot], 0));
        if (auto received = moveStep(step, plan, sending, deadline); !received) return received;
        WSYNC_CUDA_TRY(cudaEventRecord(state.sliceReady[step], state.commStream));
        WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.copyStream, state.sliceReady[step], 0));
        if (auto unpacked = copyStep(step, sending); !unpacked) return unpacked;
        WSYNC_CUDA_TRY(cudaEventRecord(state.bufferFree[slot], state.copyStream));
        WSYNC_CUDA_TRY(cudaEventRecord(state.sliceDone[step], state.copyStream));
      }
    }
    WSYNC_CUDA_TRY(cudaMemcpyAsync(regions.hostSums, regions.deviceSums, peers * sizeof(DeviceChecksumSums),
                                   cudaMemcpyDeviceToHost, state.copyStream));
    WSYNC_CUDA_TRY(cudaEventRecord(state.copyFinished, state.copyStream));
    WSYNC_CUDA_TRY(cudaEventRecord(state.commFinished, state.commStream));
    return {};
  }();
  if (state.guard) state.guard->unwatch();
  return enqueued;
}

// The step's packs (source) or unpacks (receiver), a launch a chunk, each into its pair's sums. The first pack and the
// last unpack run beside no transfer, and take the whole GPU.
tl::expected<void, ChannelFailure> NcclChannel::copyStep(std::size_t step, bool sending) {
  const NcclRegionState& regions = *state_->regions;
  const RegionSteps& steps = *regions.steps;
  const RegionStep& laid = steps.steps()[step];
  const bool unoverlapped = sending ? step == 0 : step + 1 == steps.steps().size();
  const std::uint32_t blocks = unoverlapped ? kUnoverlappedCopyBlocks : config_.copyBlocks;
  std::size_t chunkIndex = laid.firstChunk;
  for (const StepChunk& chunk : steps.chunksOf(laid)) {
    DeviceChecksumSums* sums = regions.deviceSums + regions.sumsOf[chunk.peer];
    if (auto launched = regions.table.launch(regions.chunkBatch[chunkIndex++], sums, {}, blocks, state_->copyStream);
        !launched) {
      return launched;
    }
  }
  return {};
}

// The step's sends (source) or receives (receiver), one NCCL group: NCCL moves them all at once, whatever peers
// they have, and a rank's steps wait only on the same steps of its peers.
tl::expected<void, ChannelFailure> NcclChannel::moveStep(std::size_t step, const RegionPlan& plan, bool sending,
                                                         Clock::time_point deadline) {
  State& state = *state_;
  const NcclRegionState& regions = *state.regions;
  const RegionSteps& steps = *regions.steps;
  const auto slot = static_cast<std::byte*>(regions.buffers[step % regions.buffers.size()]);
  const ncclComm_t comm = state.broadcasts();
  if (state.guard && !state.guard->enter("ncclGroupEnd")) {
    return fail(ChannelError::CommunicatorError, "the communicator was aborted; open a new channel");
  }
  ncclResult_t result = state.nccl->groupStart();
  for (const StepChunk& chunk : steps.chunksOf(steps.steps()[step])) {
    if (result != ncclSuccess) break;
    std::byte* staged = slot + chunk.staged;
    // Sources are ranks 0..M-1, receivers M..M+N-1.
    const int peer = static_cast<int>(sending ? plan.sourceCount() + chunk.peer : chunk.peer);
    result = sending ? state.nccl->send(staged, chunk.wireBytes, ncclUint8, peer, comm, state.commStream)
                     : state.nccl->recv(staged, chunk.wireBytes, ncclUint8, peer, comm, state.commStream);
  }
  // A group is ended whatever happened inside it: NCCL's group state is per thread.
  const ncclResult_t ended = state.nccl->groupEnd();
  if (result == ncclSuccess) result = ended;
  if (state.guard) {
    if (auto aborted = state.guard->leave()) return tl::unexpected(std::move(*aborted));
  }
  return state.settle(comm, sending ? "ncclSend" : "ncclRecv", result, deadline, cancel_, config_.stallTimeout);
}

tl::expected<RegionTransferResult, ChannelFailure> NcclChannel::finishRegions(const RegionPlan& plan, bool sending,
                                                                              std::uint32_t self) {
  const NcclRegionState& regions = *state_->regions;
  RegionTransferResult result(sending ? plan.receiverCount() : plan.sourceCount(), PairDigest().result());
  for (std::size_t at = 0; at < regions.steps->peers().size(); ++at) {
    const std::uint32_t peer = regions.steps->peers()[at];
    const std::uint64_t bytes = sending ? plan.bytes(self, peer) : plan.bytes(peer, self);
    result[peer] = PairResult{bytes, finishDeviceChecksum(regions.hostSums[at], bytes)};
  }
  return result;
}

tl::expected<RegionTransferResult, ChannelFailure> NcclChannel::sendRegions(
    std::uint64_t /*transfer*/, const RegionPlan& plan, std::uint32_t source,
    std::span<const std::span<const std::byte>> buffers, Clock::time_point deadline) {
  if (auto wrong = checkSourceBuffers(plan, source, buffers)) {
    state_->abort();  // the receivers would wait for this source's sends
    return tl::unexpected(std::move(*wrong));
  }
  return runRegions(plan, true, source, buffers, deadline);
}

tl::expected<RegionTransferResult, ChannelFailure> NcclChannel::receiveRegions(
    std::uint64_t /*transfer*/, const RegionPlan& plan, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, Clock::time_point deadline) {
  if (auto wrong = checkReceiverLocals(plan, receiver, locals)) {
    state_->abort();  // the sources would wait for this receiver
    return tl::unexpected(std::move(*wrong));
  }
  return runRegions(plan, false, receiver, locals, deadline);
}

}  // namespace wsync::bus::gpu
