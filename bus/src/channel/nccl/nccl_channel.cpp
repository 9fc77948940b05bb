#include "wsync/bus/channel/nccl/nccl_channel.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "channel/gpu/copy_table.hpp"
#include "channel/gpu/cuda_check.hpp"
#include "channel/nccl/nccl_state.hpp"
#include "channel/nccl/nccl_timeline_recorder.hpp"
#include "wsync/bus/channel/nccl/blocking_call_guard.hpp"
#include "wsync/bus/channel/nccl/broadcast_slices.hpp"
#include "wsync/bus/channel/nccl/nccl_library.hpp"
#include "wsync/bus/core/log.hpp"

namespace wsync::bus::gpu {

namespace {

// NcclEnqueue::BlockingChild: splits the joined communicator into a blocking child of the same ranks. Every rank
// splits, so this waits for them all, under the deadline and the cancel probe like the join.
tl::expected<void, ChannelFailure> splitBlockingChild(NcclChannel::State& state, const NcclChannelConfig& config,
                                                      Clock::time_point deadline) {
  ncclConfig_t childConfig = NCCL_CONFIG_INITIALIZER;
  childConfig.blocking = 1;
  if (config.maxCtas > 0) {
    childConfig.maxCTAs = config.maxCtas;
    childConfig.minCTAs = 1;
  }
  const ncclResult_t split = state.nccl->commSplit(state.joined, 0, config.rank, &state.child, &childConfig);
  if (split != ncclSuccess && split != ncclInProgress) {
    return tl::unexpected(ncclFailure(*state.nccl, state.joined, "ncclCommSplit", split));
  }
  // Under a non-blocking parent NCCL builds the child from its own thread and writes `child` when done, even after
  // ncclSuccess (tens of milliseconds later): wait for the pointer, then for the child to be ready.
  std::atomic_ref<ncclComm_t> child(state.child);
  while (true) {
    ncclResult_t parentState = ncclSuccess;
    state.nccl->commGetAsyncError(state.joined, &parentState);
    if (parentState != ncclSuccess && parentState != ncclInProgress) {
      return tl::unexpected(ncclFailure(*state.nccl, state.joined, "ncclCommSplit", parentState));
    }
    if (ncclComm_t built = child.load(std::memory_order_acquire); built != nullptr) {
      ncclResult_t childState = ncclSuccess;
      state.nccl->commGetAsyncError(built, &childState);
      if (childState == ncclSuccess) return {};
      if (childState != ncclInProgress) {
        return tl::unexpected(ncclFailure(*state.nccl, built, "ncclCommSplit", childState));
      }
    }
    if (Clock::now() > deadline) return fail(ChannelError::Timeout, "ncclCommSplit did not complete in time");
    if (config.cancelProbe && config.cancelProbe()) return fail(ChannelError::Aborted, "cancelled in ncclCommSplit");
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace

tl::expected<std::unique_ptr<NcclChannel>, ChannelFailure> NcclChannel::open(const NcclChannelConfig& config,
                                                                             Clock::time_point deadline) {
  if (config.worldSize < 2 || config.rank < 0 || static_cast<std::uint32_t>(config.rank) >= config.worldSize) {
    return fail(ChannelError::InvalidGeometry,
                "rank " + std::to_string(config.rank) + " of world size " + std::to_string(config.worldSize));
  }
  if (config.bufferCount < 2 || config.bufferCount > kMaxBuffers) {
    return fail(ChannelError::InvalidGeometry,
                "buffer count " + std::to_string(config.bufferCount) + " (2 to " + std::to_string(kMaxBuffers) + ")");
  }
  if (config.maxCtas < 0) {
    return fail(ChannelError::InvalidGeometry, "maxCtas " + std::to_string(config.maxCtas) + " (0: NCCL's choice)");
  }
  if (config.maxSliceBytes % kSliceAlignment != 0) {
    return fail(ChannelError::InvalidGeometry, "largest slice of " + std::to_string(config.maxSliceBytes) +
                                                   " bytes (0 or a multiple of " + std::to_string(kSliceAlignment) +
                                                   ")");
  }
  if (config.firstSliceBytes % kSliceAlignment != 0) {
    return fail(ChannelError::InvalidGeometry, "first slice of " + std::to_string(config.firstSliceBytes) +
                                                   " bytes (0 or a multiple of " + std::to_string(kSliceAlignment) +
                                                   ")");
  }
  auto library = ncclLibrary();
  if (!library) return tl::unexpected(library.error());

  auto state = std::make_unique<State>(config.timeline);
  state->nccl = *library;
  NcclEnqueue enqueue = config.enqueue;
  if (enqueue == NcclEnqueue::BlockingChild && state->nccl->commSplit == nullptr) {
    // Every rank loads the same NCCL as a rule; one that differs fails the split at the deadline, naming it.
    static std::once_flag warned;
    std::call_once(warned, [&] {
      log::warn(
          "NCCL {} has no ncclCommSplit (2.18 and later do): the nccl channel's broadcasts go through its "
          "non-blocking communicator, 0.1-0.4 ms a call",
          state->nccl->version);
    });
    enqueue = NcclEnqueue::NonBlocking;
  }
  WSYNC_CUDA_TRY(cudaGetDevice(&state->device));
  WSYNC_CUDA_TRY(cudaStreamCreateWithFlags(&state->commStream, cudaStreamNonBlocking));
  WSYNC_CUDA_TRY(cudaStreamCreateWithFlags(&state->copyStream, cudaStreamNonBlocking));
  state->bufferFree.resize(config.bufferCount);
  for (cudaEvent_t& event : state->bufferFree) {
    WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&state->copyFinished, cudaEventDisableTiming));
  WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&state->commFinished, cudaEventDisableTiming));
  WSYNC_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&state->deviceSums), sizeof(DeviceChecksumSums)));
  WSYNC_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&state->hostSums), sizeof(DeviceChecksumSums)));
  WSYNC_CUDA_TRY(detail::loadCopyKernel());

  ncclUniqueId id;
  std::memcpy(id.internal, config.uniqueId.data(), sizeof(id.internal));
  ncclConfig_t ncclConfig = NCCL_CONFIG_INITIALIZER;
  // Every call returns at once; the watchdog decides how long to wait.
  ncclConfig.blocking = 0;
  // NcclEnqueue::BlockingChild: the child shares this communicator's resources, and with them its abort flag (see
  // State::guard).
  if (enqueue == NcclEnqueue::BlockingChild) ncclConfig.splitShare = 1;
  if (config.maxCtas > 0) {
    ncclConfig.maxCTAs = config.maxCtas;
    ncclConfig.minCTAs = 1;  // NCCL refuses a minimum above the maximum
  }
  const ncclResult_t started =
      state->nccl->commInitRankConfig(&state->joined, static_cast<int>(config.worldSize), id, config.rank, &ncclConfig);
  if (started != ncclSuccess && started != ncclInProgress) {
    auto failure = ncclFailure(*state->nccl, state->joined, "ncclCommInitRankConfig", started);
    state->abort();
    return tl::unexpected(failure);
  }
  // Joining waits for every rank, however long they take to come: only the deadline and the probe end it.
  if (auto ready = state->settle(state->joined, "ncclCommInitRankConfig", started, deadline, config.cancelProbe,
                                 Clock::duration::max());
      !ready) {
    state->abort();
    return tl::unexpected(ready.error());
  }
  if (enqueue == NcclEnqueue::BlockingChild) {
    if (auto split = splitBlockingChild(*state, config, deadline); !split) {
      state->abort();
      return tl::unexpected(split.error());
    }
    State* owner = state.get();
    state->guard = std::make_unique<BlockingCallGuard>([owner] {
      owner->nccl->commAbort(owner->joined);
      owner->joined = nullptr;
    });
  }
  return std::unique_ptr<NcclChannel>(new NcclChannel(config, std::move(state)));
}

std::uint64_t maxSliceBytes(const NcclChannelConfig& config, std::uint64_t bucketBytes) {
  if (config.maxSliceBytes != 0) return config.maxSliceBytes;
  const std::uint64_t share = (bucketBytes + kNcclSlicesPerBucket - 1) / kNcclSlicesPerBucket;
  return (share + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment;
}

NcclChannel::NcclChannel(NcclChannelConfig config, std::unique_ptr<State> state)
    : config_(config), key_("nccl:" + toHex(config.uniqueId)), state_(std::move(state)) {}

NcclChannel::~NcclChannel() {
  if (state_->joined == nullptr && state_->child == nullptr) return;
  cudaSetDevice(state_->device);
  // No operation is in flight here (every transfer waits for its device work to finish), so there is nothing to
  // flush. ncclCommFinalize would wait for the other ranks to finalize too: a worker that stops after the trainer
  // has exited would sit out the whole finalize timeout. ncclCommAbort frees the same resources at once.
  state_->abort();
}

ChannelState NcclChannel::state() const { return state_->broken ? ChannelState::Broken : ChannelState::Usable; }

ChannelMemory NcclChannel::memory() const {
  ChannelMemory memory{.bufferBytes = state_->bufferBytes * state_->buffers.size(),
                       .tableBytes = state_->table.deviceBytes() + sizeof(DeviceChecksumSums)};
  if (const NcclRegionState* regions = state_->regions.get()) {
    memory.bufferBytes += regions->bufferBytes * regions->buffers.size();
    memory.tableBytes += regions->table.deviceBytes() + regions->sumsCapacity * sizeof(DeviceChecksumSums);
  }
  return memory;
}

namespace {

// Checks that `tensors` have the plan's sizes and that pieces start on 8-byte boundaries in their tensors.
tl::expected<std::uint64_t, ChannelFailure> checkTensors(const BucketPlan& plan, std::size_t tensorCount,
                                                         auto tensorBytes) {
  if (plan.alignment() < kMinAlignment) {
    return fail(ChannelError::PlanMismatch, "GPU channels need a bucket alignment of at least " +
                                                std::to_string(kMinAlignment) + ", the plan has " +
                                                std::to_string(plan.alignment()));
  }
  std::uint64_t total = 0;
  for (std::size_t tensor = 0; tensor < tensorCount; ++tensor) {
    std::uint64_t planned = 0;
    for (const Piece& piece : plan.piecesOfTensor(static_cast<std::uint32_t>(tensor))) planned += piece.bytes;
    if (planned != tensorBytes(tensor)) {
      return fail(ChannelError::PlanMismatch, "tensor " + std::to_string(tensor) + " has " +
                                                  std::to_string(tensorBytes(tensor)) + " bytes, the plan " +
                                                  std::to_string(planned));
    }
    total += planned;
  }
  if (!plan.pieces().empty() && plan.pieces().back().tensor >= tensorCount) {
    return fail(ChannelError::PlanMismatch,
                "the plan has more tensors than the " + std::to_string(tensorCount) + " given");
  }
  return total;
}

}  // namespace

// Both sides, step by step (nccl_channel.hpp, "The steps of a transfer").
template <typename Byte>
tl::expected<TransferResult, ChannelFailure> NcclChannel::run(const BucketPlan& plan,
                                                              std::span<const std::span<Byte>> tensors,
                                                              Clock::time_point deadline) {
  // No transfer number: NCCL orders broadcasts itself, and every rank runs the same transfers in the same order.
  const auto entered = Clock::now();
  State& state = *state_;
  if (state.broken) {
    return fail(ChannelError::CommunicatorError, "the communicator was aborted; open a new channel");
  }
  WSYNC_CUDA_TRY(cudaSetDevice(state.device));
  auto failed = [&state](ChannelFailure failure) -> tl::expected<TransferResult, ChannelFailure> {
    // The other ranks would wait for this one forever: abort, so that their watchdogs see it too.
    state.abort();
    return tl::unexpected(std::move(failure));
  };
  if (auto laidOut = layOut(plan, tensors); !laidOut) return failed(laidOut.error());
  state.timeline.begin(entered);
  if (auto enqueued = enqueue(deadline); !enqueued) return failed(enqueued.error());
  const WatchedTransfer watched{
      .slices = state.routes.size(),
      .payload = [&state](std::size_t slice) { return state.routes[slice].payload; },
      .done =
          [&](std::size_t next) {
            return std::to_string(next == state.routes.size() ? plan.bucketCount() : state.routes[next].bucket) +
                   " of " + std::to_string(plan.bucketCount()) + " buckets";
          },
      .call = "broadcast"};
  if (auto done = watch(watched, deadline); !done) return failed(done.error());
  return finish();
}

template <typename Byte>
tl::expected<void, ChannelFailure> NcclChannel::layOut(const BucketPlan& plan,
                                                       std::span<const std::span<Byte>> tensors) {
  State& state = *state_;
  const Digest tensorsKey = layoutKeyOf(tensors);
  std::vector<std::uint64_t> planKey{plan.bucketBytes(), plan.alignment(), plan.bucketCount(), plan.pieces().size()};
  if (tensorsKey == state.tensorsKey && planKey == state.planKey) return {};
  state.tensorsKey.reset();
  auto total = checkTensors(plan, tensors.size(), [&](std::size_t tensor) { return tensors[tensor].size(); });
  if (!total) return tl::unexpected(total.error());
  const std::vector<BroadcastSlice> slices =
      broadcastSlices(plan, config_.firstSliceBytes, maxSliceBytes(config_, plan.bucketBytes()));
  if (auto allocated = allocate(slices); !allocated) return allocated;
  if (auto routed = route(plan, slices, tensors); !routed) return routed;
  state.tensorsKey = tensorsKey;
  state.planKey = std::move(planKey);
  state.totalBytes = *total;
  return {};
}

tl::expected<void, ChannelFailure> NcclChannel::allocate(const std::vector<BroadcastSlice>& slices) {
  State& state = *state_;
  // A direct slice is broadcast between the tensors; the others are staged.
  std::uint64_t stagingBytes = 0;
  for (const BroadcastSlice& slice : slices) {
    if (!slice.direct) stagingBytes = std::max(stagingBytes, slice.bytes);
  }
  if (state.bufferBytes < stagingBytes) {
    state.releaseBuffers();
    state.buffers.assign(config_.bufferCount, nullptr);
    for (void*& buffer : state.buffers) {
      if (const cudaError_t error = cudaMalloc(&buffer, stagingBytes); error != cudaSuccess) {
        return tl::unexpected(detail::cudaFailure("cudaMalloc (staging buffer)", error));
      }
    }
    state.bufferBytes = stagingBytes;
  }
  for (auto* events : {&state.sliceReady, &state.sliceDone}) {
    while (events->size() < slices.size()) {
      cudaEvent_t event = nullptr;
      if (const cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); error != cudaSuccess) {
        return tl::unexpected(detail::cudaFailure("cudaEventCreate", error));
      }
      events->push_back(event);
    }
  }
  return state.timeline.layOut(slices);
}

template <typename Byte>
tl::expected<void, ChannelFailure> NcclChannel::route(const BucketPlan& plan, const std::vector<BroadcastSlice>& slices,
                                                      std::span<const std::span<Byte>> tensors) {
  State& state = *state_;
  const bool sender = config_.rank == 0;
  state.table.clear();
  state.routes.assign(slices.size(), SliceRoute{});
  const std::vector<SlicePart> parts = sliceParts(plan, slices);
  std::size_t part = 0;
  std::uint32_t staged = 0;  // slices staged so far: they take the buffers in turn
  for (std::size_t index = 0; index < slices.size(); ++index) {
    const BroadcastSlice& slice = slices[index];
    SliceRoute& route = state.routes[index];
    route.direct = slice.direct;
    if (!route.direct) route.slot = staged++ % config_.bufferCount;
    route.bucket = slice.bucket;
    route.bytes = slice.bytes;
    route.batch = state.table.batchCount();
    // A staged slice's bytes start at its buffer's start.
    const auto buffer = route.direct ? 0 : reinterpret_cast<std::uint64_t>(state.buffers[route.slot]);
    state.table.beginBatch();
    for (; part < parts.size() && parts[part].slice == index; ++part) {
      const SlicePart& at = parts[part];
      const auto tensorAddress = reinterpret_cast<std::uint64_t>(tensors[at.tensor].data() + at.tensorOffset);
      if (route.direct) {
        // One part, the broadcast itself: its checksum only.
        route.address = tensorAddress;
        state.table.add(tensorAddress, 0, at.bytes, at.tensor, at.tensorOffset);
      } else if (sender) {
        state.table.add(tensorAddress, buffer + at.sliceOffset, at.bytes, at.tensor, at.tensorOffset);
      } else {
        state.table.add(buffer + at.sliceOffset, tensorAddress, at.bytes, at.tensor, at.tensorOffset);
      }
      route.payload += at.bytes;
    }
    if (!route.direct) route.address = buffer;
  }
  return state.table.upload();
}

tl::expected<void, ChannelFailure> NcclChannel::enqueue(Clock::time_point deadline) {
  State& state = *state_;
  if (state.guard) state.guard->watch(deadline, config_.stallTimeout, &cancel_);
  auto enqueued = enqueueSlices(deadline);
  if (state.guard) state.guard->unwatch();
  if (enqueued) state.timeline.enqueued();
  return enqueued;
}

tl::expected<void, ChannelFailure> NcclChannel::enqueueSlices(Clock::time_point deadline) {
  State& state = *state_;
  const bool sender = config_.rank == 0;
  WSYNC_CUDA_TRY(state.timeline.markOrigin(state.copyStream));
  WSYNC_CUDA_TRY(cudaMemsetAsync(state.deviceSums, 0, sizeof(DeviceChecksumSums), state.copyStream));
  for (std::size_t index = 0; index < state.routes.size(); ++index) {
    if (auto queued = sender ? enqueueSend(index, deadline) : enqueueReceive(index, deadline); !queued) {
      return queued;
    }
  }
  WSYNC_CUDA_TRY(cudaMemcpyAsync(state.hostSums, state.deviceSums, sizeof(DeviceChecksumSums), cudaMemcpyDeviceToHost,
                                 state.copyStream));
  WSYNC_CUDA_TRY(cudaEventRecord(state.copyFinished, state.copyStream));
  WSYNC_CUDA_TRY(cudaEventRecord(state.commFinished, state.commStream));
  return {};
}

tl::expected<void, ChannelFailure> NcclChannel::enqueueSend(std::size_t index, Clock::time_point deadline) {
  State& state = *state_;
  const SliceRoute& route = state.routes[index];
  const std::uint32_t slot = route.slot;
  if (!route.direct) {
    WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.copyStream, state.bufferFree[slot], 0));
  }
  if (auto packed = copy(index); !packed) return packed;
  if (!route.direct) {
    WSYNC_CUDA_TRY(cudaEventRecord(state.sliceReady[index], state.copyStream));
    WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.commStream, state.sliceReady[index], 0));
  }
  if (auto sent = broadcast(index, deadline); !sent) return sent;
  if (!route.direct) {
    WSYNC_CUDA_TRY(cudaEventRecord(state.bufferFree[slot], state.commStream));
  }
  WSYNC_CUDA_TRY(cudaEventRecord(state.sliceDone[index], state.commStream));
  return {};
}

tl::expected<void, ChannelFailure> NcclChannel::enqueueReceive(std::size_t index, Clock::time_point deadline) {
  State& state = *state_;
  const SliceRoute& route = state.routes[index];
  const std::uint32_t slot = route.slot;
  if (!route.direct) {
    WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.commStream, state.bufferFree[slot], 0));
  }
  if (auto received = broadcast(index, deadline); !received) return received;
  WSYNC_CUDA_TRY(cudaEventRecord(state.sliceReady[index], state.commStream));
  WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.copyStream, state.sliceReady[index], 0));
  if (auto unpacked = copy(index); !unpacked) return unpacked;
  if (!route.direct) {
    WSYNC_CUDA_TRY(cudaEventRecord(state.bufferFree[slot], state.copyStream));
  }
  WSYNC_CUDA_TRY(cudaEventRecord(state.sliceDone[index], state.copyStream));
  return {};
}

tl::expected<void, ChannelFailure> NcclChannel::copy(std::size_t index) {
  State& state = *state_;
  WSYNC_CUDA_TRY(state.timeline.mark(index, detail::SliceEvent::CopyBegin, state.copyStream));
  if (auto launched =
          state.table.launch(state.routes[index].batch, state.deviceSums, {}, copyBlocks(index), state.copyStream);
      !launched) {
    return tl::unexpected(launched.error());
  }
  WSYNC_CUDA_TRY(state.timeline.mark(index, detail::SliceEvent::CopyEnd, state.copyStream));
  return {};
}

std::uint32_t NcclChannel::copyBlocks(std::size_t index) const {
  const std::vector<SliceRoute>& routes = state_->routes;
  const bool sender = config_.rank == 0;
  // (A sender's direct slice is broadcast while its checksum runs: that launch keeps to copyBlocks.)
  const bool unoverlapped = sender ? index == 0 && !routes[index].direct : index + 1 == routes.size();
  // The broadcast this copy runs beside: the previous slice's (sender's pack), the next one's (receiver's unpack).
  const std::size_t beside = sender ? (index == 0 ? 0 : index - 1) : std::min(index + 1, routes.size() - 1);
  const bool ramp = routes[beside].bytes < routes[index].bytes;
  return unoverlapped ? kUnoverlappedCopyBlocks : (ramp ? config_.rampCopyBlocks : config_.copyBlocks);
}

tl::expected<void, ChannelFailure> NcclChannel::broadcast(std::size_t index, Clock::time_point deadline) {
  State& state = *state_;
  void* target = reinterpret_cast<void*>(state.routes[index].address);
  const std::uint64_t bytes = state.routes[index].bytes;
  const ncclComm_t comm = state.broadcasts();
  WSYNC_CUDA_TRY(state.timeline.mark(index, detail::SliceEvent::BroadcastBegin, state.commStream));
  const auto called = Clock::now();
  ncclResult_t result = ncclSuccess;
  if (state.guard) {
    if (!state.guard->enter("ncclBroadcast")) {
      return fail(ChannelError::CommunicatorError, "the communicator was aborted; open a new channel");
    }
    result = state.nccl->broadcast(target, target, bytes, ncclUint8, 0, comm, state.commStream);
    if (auto aborted = state.guard->leave()) return tl::unexpected(std::move(*aborted));
  } else {
    result = state.nccl->broadcast(target, target, bytes, ncclUint8, 0, comm, state.commStream);
  }
  const auto returned = Clock::now();
  if (auto settled = state.settle(comm, "ncclBroadcast", result, deadline, cancel_, config_.stallTimeout); !settled) {
    return settled;
  }
  state.timeline.timeCall(index, called, returned, result == ncclInProgress);
  WSYNC_CUDA_TRY(state.timeline.mark(index, detail::SliceEvent::BroadcastEnd, state.commStream));
  return {};
}

// Progress is a slice finishing on this rank.
tl::expected<void, ChannelFailure> NcclChannel::watch(const WatchedTransfer& transfer, Clock::time_point deadline) {
  State& state = *state_;
  std::size_t nextSlice = 0;
  std::uint64_t bytesDone = 0;
  auto lastProgress = Clock::now();
  while (true) {
    const std::size_t firstPending = nextSlice;
    while (nextSlice < transfer.slices && cudaEventQuery(state.sliceDone[nextSlice]) == cudaSuccess) {
      bytesDone += transfer.payload(nextSlice);
      ++nextSlice;
      lastProgress = Clock::now();
    }
    if (nextSlice != firstPending) reportProgress(bytesDone);
    if (nextSlice == transfer.slices && cudaEventQuery(state.copyFinished) == cudaSuccess &&
        cudaEventQuery(state.commFinished) == cudaSuccess) {
      break;
    }
    if (auto stop = whyStop(transfer, nextSlice, lastProgress, deadline)) return tl::unexpected(std::move(*stop));
    // The last slice (a ramp's first-slice size: a fraction of a millisecond) is watched without sleeping, so that
    // the end is seen within microseconds, not a sleep's length late.
    if (config_.pollInterval.count() > 0 && nextSlice + 1 < transfer.slices) {
      std::this_thread::sleep_for(config_.pollInterval);
    } else {
      std::this_thread::yield();
    }
  }
  state.timeline.doneSeen();
  return {};
}

std::optional<ChannelFailure> NcclChannel::whyStop(const WatchedTransfer& transfer, std::size_t nextSlice,
                                                   Clock::time_point lastProgress, Clock::time_point deadline) const {
  const State& state = *state_;
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess && error != cudaErrorNotReady) {
    return detail::cudaFailure("transfer", error);
  }
  ncclResult_t asyncError = ncclSuccess;
  state.nccl->commGetAsyncError(state.broadcasts(), &asyncError);
  if (asyncError != ncclSuccess && asyncError != ncclInProgress) {
    return ncclFailure(*state.nccl, state.broadcasts(), transfer.call, asyncError);
  }
  const auto now = Clock::now();
  if (cancel_ && cancel_()) return ChannelFailure{ChannelError::Aborted, "cancelled after " + transfer.done(nextSlice)};
  if (now > deadline) return ChannelFailure{ChannelError::Timeout, "deadline passed after " + transfer.done(nextSlice)};
  if (now - lastProgress > config_.stallTimeout) {
    return ChannelFailure{
        ChannelError::Timeout,
        std::string("no ") + transfer.call + " finished for " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(config_.stallTimeout).count()) +
            " ms (after " + transfer.done(nextSlice) + "): a peer is dead or stuck"};
  }
  return std::nullopt;
}

tl::expected<TransferResult, ChannelFailure> NcclChannel::finish() {
  State& state = *state_;
  // The device is done: a timeline that cannot be read back fails this rank's transfer, and no other rank's.
  if (auto collected = state.timeline.collect(); !collected) return tl::unexpected(collected.error());
  const Digest digest = finishDeviceChecksum(*state.hostSums, state.totalBytes);
  state.timeline.returned();
  return TransferResult{.bytes = state.totalBytes, .digest = digest};
}

const std::vector<NcclSliceTiming>& NcclChannel::timeline() const { return state_->timeline.slices(); }

const NcclHostTiming& NcclChannel::hostTiming() const { return state_->timeline.hostTiming(); }

tl::expected<TransferResult, ChannelFailure> NcclChannel::send(std::uint64_t /*transfer*/, const BucketPlan& plan,
                                                               std::span<const std::span<const std::byte>> tensors,
                                                               std::uint32_t receiverCount,
                                                               Clock::time_point deadline) {
  if (receiverCount + 1 != config_.worldSize || config_.rank != 0) {
    return fail(ChannelError::InvalidGeometry,
                "send is rank 0's, to the " + std::to_string(config_.worldSize - 1) + " other ranks");
  }
  return run(plan, tensors, deadline);
}

tl::expected<TransferResult, ChannelFailure> NcclChannel::receive(std::uint64_t /*transfer*/, const BucketPlan& plan,
                                                                  std::span<const std::span<std::byte>> tensors,
                                                                  std::uint32_t receiver, Clock::time_point deadline) {
  if (static_cast<std::int32_t>(receiver) + 1 != config_.rank) {
    return fail(ChannelError::InvalidGeometry,
                "receiver " + std::to_string(receiver) + " is not rank " + std::to_string(config_.rank) + " - 1");
  }
  return run(plan, tensors, deadline);
}

}  // namespace wsync::bus::gpu
