#include "wsync/bus/channel/nccl/nccl_channel.hpp"

#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "channel/gpu/copy_table.hpp"
#include "channel/gpu/cuda_check.hpp"
#include "wsync/bus/channel/nccl/nccl_library.hpp"

namespace wsync::bus::gpu {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting transfer looks at its events, NCCL's error state and the cancel probe: short against a
// bucket's broadcast (about a millisecond for 256 MiB on NVLink), long enough not to burn a core.
constexpr std::chrono::microseconds kPollInterval{100};
// After ncclCommAbort, how long the channel waits for its streams to drain (NCCL's kernels notice the abort flag
// within microseconds; this only bounds a device that stopped answering).
constexpr std::chrono::seconds kAbortDrainTimeout{10};
constexpr std::uint32_t kMaxBuffers = 8;
// The bucket plan's alignment must keep every piece's start in its tensor a multiple of 8 (the checksum reads
// 8-byte words) and bucket offsets suited to 16-byte vector copies.
constexpr std::uint32_t kMinAlignment = 16;

ChannelFailure ncclFailure(const NcclLibrary& nccl, ncclComm_t comm, const char* call, ncclResult_t result) {
  std::string detail = std::string(call) + ": " + nccl.getErrorString(result);
  const char* last = nccl.getLastError(comm);
  if (last != nullptr && *last != '\0') detail += std::string(" (") + last + ")";
  return ChannelFailure{ChannelError::CommunicatorError, detail};
}

// How bucket `bucket` travels: straight between the tensors, or through a buffer.
struct BucketRoute {
  bool direct = false;
  std::uint64_t address = 0;  // direct: the sender's or receiver's tensor bytes
  std::uint64_t bytes = 0;    // broadcast count
  std::size_t batch = 0;      // the pack/unpack (or, direct, the checksum-only) batch of the copy table
};

}  // namespace

struct NcclChannel::State {
  const NcclLibrary* nccl = nullptr;
  ncclComm_t comm = nullptr;
  bool broken = false;
  int device = 0;
  cudaStream_t commStream = nullptr;
  cudaStream_t copyStream = nullptr;
  std::vector<void*> buffers;
  std::uint64_t bufferBytes = 0;
  std::vector<cudaEvent_t> bufferReady;  // packed (sender) or received (receiver)
  std::vector<cudaEvent_t> bufferFree;   // broadcast (sender) or unpacked (receiver)
  cudaEvent_t directReady = nullptr;
  std::vector<cudaEvent_t> bucketDone;
  cudaEvent_t copyFinished = nullptr;
  cudaEvent_t commFinished = nullptr;
  DeviceChecksumSums* deviceSums = nullptr;
  DeviceChecksumSums* hostSums = nullptr;  // pinned
  detail::CopyTable table;
  std::vector<BucketRoute> routes;
  std::vector<std::uint64_t> layoutKey;  // what `routes` and `table` were built for
  std::uint64_t totalBytes = 0;

  ~State() {
    for (void* buffer : buffers) cudaFree(buffer);
    for (cudaEvent_t event : bufferReady) cudaEventDestroy(event);
    for (cudaEvent_t event : bufferFree) cudaEventDestroy(event);
    for (cudaEvent_t event : bucketDone) cudaEventDestroy(event);
    if (directReady != nullptr) cudaEventDestroy(directReady);
    if (copyFinished != nullptr) cudaEventDestroy(copyFinished);
    if (commFinished != nullptr) cudaEventDestroy(commFinished);
    if (deviceSums != nullptr) cudaFree(deviceSums);
    if (hostSums != nullptr) cudaFreeHost(hostSums);
    if (commStream != nullptr) cudaStreamDestroy(commStream);
    if (copyStream != nullptr) cudaStreamDestroy(copyStream);
  }

  // Waits while NCCL is still enqueueing or connecting (a non-blocking communicator's ncclInProgress): the first
  // broadcast connects the ranks, and keeps retrying a dead peer, so the cancel probe and the stall timeout apply.
  tl::expected<void, ChannelFailure> settle(const char* call, ncclResult_t result, Clock::time_point deadline,
                                            const std::function<bool()>& cancel, Clock::duration stallTimeout) {
    const auto started = Clock::now();
    while (result == ncclInProgress) {
      const auto now = Clock::now();
      if (now > deadline) return fail(ChannelError::Timeout, std::string(call) + " did not complete in time");
      if (cancel && cancel()) return fail(ChannelError::Aborted, std::string("cancelled in ") + call);
      if (now - started > stallTimeout) {
        return fail(ChannelError::Timeout, std::string(call) + " made no progress for " +
                                               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  stallTimeout).count()) +
                                               " ms: a peer is dead or stuck");
      }
      std::this_thread::sleep_for(kPollInterval);
      nccl->commGetAsyncError(comm, &result);
    }
    if (result != ncclSuccess) return tl::unexpected(ncclFailure(*nccl, comm, call, result));
    return {};
  }

  // Kills the communicator (NCCL's kernels return), drains the streams and marks the channel broken.
  void abort() {
    if (comm != nullptr) {
      nccl->commAbort(comm);
      comm = nullptr;
    }
    broken = true;
    const auto drainDeadline = Clock::now() + kAbortDrainTimeout;
    for (cudaStream_t stream : {commStream, copyStream}) {
      while (cudaStreamQuery(stream) == cudaErrorNotReady && Clock::now() < drainDeadline) {
        std::this_thread::sleep_for(kPollInterval);
      }
    }
    cudaGetLastError();
  }
};

tl::expected<std::unique_ptr<NcclChannel>, ChannelFailure> NcclChannel::open(const NcclChannelConfig& config,
                                                                             Clock::time_point deadline) {
  if (config.worldSize < 2 || config.rank < 0 || static_cast<std::uint32_t>(config.rank) >= config.worldSize) {
    return fail(ChannelError::InvalidGeometry, "rank " + std::to_string(config.rank) + " of world size " +
                                                   std::to_string(config.worldSize));
  }
  if (config.bufferCount < 2 || config.bufferCount > kMaxBuffers) {
    return fail(ChannelError::InvalidGeometry, "buffer count " + std::to_string(config.bufferCount) +
                                                   " (2 to " + std::to_string(kMaxBuffers) + ")");
  }
  auto library = ncclLibrary();
  if (!library) return tl::unexpected(library.error());

  auto state = std::make_unique<State>();
  state->nccl = *library;
  WSYNC_CUDA_TRY(cudaGetDevice(&state->device));
  WSYNC_CUDA_TRY(cudaStreamCreateWithFlags(&state->commStream, cudaStreamNonBlocking));
  WSYNC_CUDA_TRY(cudaStreamCreateWithFlags(&state->copyStream, cudaStreamNonBlocking));
  state->bufferReady.resize(config.bufferCount);
  state->bufferFree.resize(config.bufferCount);
  for (std::uint32_t index = 0; index < config.bufferCount; ++index) {
    WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&state->bufferReady[index], cudaEventDisableTiming));
    WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&state->bufferFree[index], cudaEventDisableTiming));
  }
  WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&state->directReady, cudaEventDisableTiming));
  WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&state->copyFinished, cudaEventDisableTiming));
  WSYNC_CUDA_TRY(cudaEventCreateWithFlags(&state->commFinished, cudaEventDisableTiming));
  WSYNC_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&state->deviceSums), sizeof(DeviceChecksumSums)));
  WSYNC_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&state->hostSums), sizeof(DeviceChecksumSums)));
  WSYNC_CUDA_TRY(detail::loadCopyKernel());

  ncclUniqueId id;
  std::memcpy(id.internal, config.uniqueId.data(), sizeof(id.internal));
  ncclConfig_t ncclConfig = NCCL_CONFIG_INITIALIZER;
  ncclConfig.blocking = 0;  // every call returns at once; the watchdog decides how long to wait
  const ncclResult_t started = state->nccl->commInitRankConfig(&state->comm, static_cast<int>(config.worldSize), id,
                                                               config.rank, &ncclConfig);
  if (started != ncclSuccess && started != ncclInProgress) {
    auto failure = ncclFailure(*state->nccl, state->comm, "ncclCommInitRankConfig", started);
    state->abort();
    return tl::unexpected(failure);
  }
  // Joining waits for every rank, however long they take to come: only the deadline and the probe end it.
  if (auto ready = state->settle("ncclCommInitRankConfig", started, deadline, config.cancelProbe, Clock::duration::max());
      !ready) {
    state->abort();
    return tl::unexpected(ready.error());
  }
  return std::unique_ptr<NcclChannel>(new NcclChannel(config, std::move(state)));
}

NcclChannel::NcclChannel(NcclChannelConfig config, std::unique_ptr<State> state)
    : config_(config), key_("nccl:" + toHex(config.uniqueId)), state_(std::move(state)) {}

NcclChannel::~NcclChannel() {
  if (state_->comm == nullptr) return;
  cudaSetDevice(state_->device);
  // No operation is in flight here (every transfer waits for its device work to finish), so there is nothing to
  // flush. ncclCommFinalize would wait for the other ranks to finalize too: on 4 x H200 a worker that stopped after
  // the trainer had exited sat out the whole finalize timeout. ncclCommAbort frees the same resources at once.
  state_->abort();
}

ChannelState NcclChannel::state() const { return state_->broken ? ChannelState::Broken : ChannelState::Usable; }

ChannelMemory NcclChannel::memory() const {
  return ChannelMemory{.bufferBytes = state_->bufferBytes * state_->buffers.size(),
                       .tableBytes = state_->table.deviceBytes() + sizeof(DeviceChecksumSums)};
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
    return fail(ChannelError::PlanMismatch, "the plan has more tensors than the " + std::to_string(tensorCount) +
                                                " given");
  }
  return total;
}

}  // namespace

tl::expected<TransferResult, ChannelFailure> NcclChannel::send(std::uint64_t transfer, const BucketPlan& plan,
                                                               std::span<const std::span<const std::byte>> tensors,
                                                               std::uint32_t receiverCount,
                                                               Clock::time_point deadline) {
  if (receiverCount + 1 != config_.worldSize || config_.rank != 0) {
    return fail(ChannelError::InvalidGeometry, "send is rank 0's, to the " + std::to_string(config_.worldSize - 1) +
                                                   " other ranks");
  }
  std::vector<std::byte*> addresses(tensors.size());
  std::vector<std::uint64_t> sizes(tensors.size());
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    addresses[index] = const_cast<std::byte*>(tensors[index].data());  // read only: the broadcast's source
    sizes[index] = tensors[index].size();
  }
  return run(transfer, plan, addresses, sizes, deadline);
}

tl::expected<TransferResult, ChannelFailure> NcclChannel::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                                  std::span<const std::span<std::byte>> tensors,
                                                                  std::uint32_t receiver,
                                                                  Clock::time_point deadline) {
  if (static_cast<std::int32_t>(receiver) + 1 != config_.rank) {
    return fail(ChannelError::InvalidGeometry, "receiver " + std::to_string(receiver) + " is not rank " +
                                                   std::to_string(config_.rank) + " - 1");
  }
  std::vector<std::byte*> addresses(tensors.size());
  std::vector<std::uint64_t> sizes(tensors.size());
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    addresses[index] = tensors[index].data();
    sizes[index] = tensors[index].size();
  }
  return run(transfer, plan, addresses, sizes, deadline);
}

tl::expected<TransferResult, ChannelFailure> NcclChannel::run(std::uint64_t transfer, const BucketPlan& plan,
                                                              const std::vector<std::byte*>& addresses,
                                                              const std::vector<std::uint64_t>& sizes,
                                                              Clock::time_point deadline) {
  (void)transfer;  // NCCL orders broadcasts itself: every rank runs the same transfers in the same order
  State& state = *state_;
  if (state.broken) {
    return fail(ChannelError::CommunicatorError, "the communicator was aborted; open a new channel");
  }
  WSYNC_CUDA_TRY(cudaSetDevice(state.device));
  const bool sender = config_.rank == 0;

  auto failed = [&](ChannelFailure failure) -> tl::expected<TransferResult, ChannelFailure> {
    // The other ranks would wait for this one forever: abort, so that their watchdogs see it too.
    state.abort();
    return tl::unexpected(std::move(failure));
  };

  // The layout: rebuilt only when the plan, the tensors or the buffers differ from the last transfer's.
  std::vector<std::uint64_t> key{plan.bucketBytes(), plan.alignment(), plan.bucketCount(), plan.pieces().size()};
  for (std::size_t index = 0; index < addresses.size(); ++index) {
    key.push_back(reinterpret_cast<std::uint64_t>(addresses[index]));
    key.push_back(sizes[index]);
  }
  if (key != state.layoutKey) {
    auto total = checkTensors(plan, addresses.size(), [&](std::size_t tensor) { return sizes[tensor]; });
    if (!total) return failed(total.error());
    if (state.bufferBytes < plan.bucketBytes()) {
      for (void* buffer : state.buffers) cudaFree(buffer);
      state.buffers.assign(config_.bufferCount, nullptr);
      state.bufferBytes = 0;
      for (void*& buffer : state.buffers) {
        if (const cudaError_t error = cudaMalloc(&buffer, plan.bucketBytes()); error != cudaSuccess) {
          return failed(detail::cudaFailure("cudaMalloc (bucket buffer)", error));
        }
      }
      state.bufferBytes = plan.bucketBytes();
    }
    while (state.bucketDone.size() < plan.bucketCount()) {
      cudaEvent_t event = nullptr;
      if (const cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); error != cudaSuccess) {
        return failed(detail::cudaFailure("cudaEventCreate", error));
      }
      state.bucketDone.push_back(event);
    }
    state.table.clear();
    state.routes.assign(plan.bucketCount(), BucketRoute{});
    for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
      const auto pieces = plan.piecesOfBucket(bucket);
      const std::uint64_t used = plan.bucketUsedBytes(bucket);
      auto* buffer = static_cast<std::byte*>(state.buffers[bucket % config_.bufferCount]);
      BucketRoute& route = state.routes[bucket];
      route.direct = pieces.size() == 1 && pieces[0].bucketOffset == 0 && pieces[0].bytes == used;
      route.bytes = used;
      route.batch = state.table.batchCount();
      state.table.beginBatch();
      for (const Piece& piece : pieces) {
        const auto tensorAddress = reinterpret_cast<std::uint64_t>(addresses[piece.tensor] + piece.tensorOffset);
        const auto bufferAddress = reinterpret_cast<std::uint64_t>(buffer + piece.bucketOffset);
        if (route.direct) {
          route.address = tensorAddress;
          state.table.add(tensorAddress, 0, piece.bytes, piece.tensor, piece.tensorOffset);
        } else if (sender) {
          state.table.add(tensorAddress, bufferAddress, piece.bytes, piece.tensor, piece.tensorOffset);
        } else {
          state.table.add(bufferAddress, tensorAddress, piece.bytes, piece.tensor, piece.tensorOffset);
        }
      }
    }
    if (auto uploaded = state.table.upload(); !uploaded) return failed(uploaded.error());
    state.layoutKey = std::move(key);
    state.totalBytes = *total;
  }

  // Enqueue the whole transfer; nothing below waits for the device.
  auto enqueue = [&]() -> tl::expected<void, ChannelFailure> {
    WSYNC_CUDA_TRY(cudaMemsetAsync(state.deviceSums, 0, sizeof(DeviceChecksumSums), state.copyStream));
    for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
      const BucketRoute& route = state.routes[bucket];
      const std::uint32_t slot = bucket % config_.bufferCount;
      void* target = route.direct ? reinterpret_cast<void*>(route.address) : state.buffers[slot];
      if (sender) {
        if (!route.direct) {
          WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.copyStream, state.bufferFree[slot], 0));
        }
        if (auto launched = state.table.launch(route.batch, state.deviceSums, config_.copyBlocks, state.copyStream);
            !launched) {
          return tl::unexpected(launched.error());
        }
        if (!route.direct) {
          WSYNC_CUDA_TRY(cudaEventRecord(state.bufferReady[slot], state.copyStream));
          WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.commStream, state.bufferReady[slot], 0));
        }
        const ncclResult_t sent = state.nccl->broadcast(target, target, route.bytes, ncclUint8, 0, state.comm,
                                                        state.commStream);
        if (auto settled = state.settle("ncclBroadcast", sent, deadline, cancel_, config_.stallTimeout); !settled) {
          return settled;
        }
        if (!route.direct) WSYNC_CUDA_TRY(cudaEventRecord(state.bufferFree[slot], state.commStream));
        WSYNC_CUDA_TRY(cudaEventRecord(state.bucketDone[bucket], state.commStream));
      } else {
        if (!route.direct) WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.commStream, state.bufferFree[slot], 0));
        const ncclResult_t received = state.nccl->broadcast(target, target, route.bytes, ncclUint8, 0, state.comm,
                                                            state.commStream);
        if (auto settled = state.settle("ncclBroadcast", received, deadline, cancel_, config_.stallTimeout); !settled) {
          return settled;
        }
        cudaEvent_t landed = route.direct ? state.directReady : state.bufferReady[slot];
        WSYNC_CUDA_TRY(cudaEventRecord(landed, state.commStream));
        WSYNC_CUDA_TRY(cudaStreamWaitEvent(state.copyStream, landed, 0));
        if (auto launched = state.table.launch(route.batch, state.deviceSums, config_.copyBlocks, state.copyStream);
            !launched) {
          return tl::unexpected(launched.error());
        }
        if (!route.direct) WSYNC_CUDA_TRY(cudaEventRecord(state.bufferFree[slot], state.copyStream));
        WSYNC_CUDA_TRY(cudaEventRecord(state.bucketDone[bucket], state.copyStream));
      }
    }
    WSYNC_CUDA_TRY(cudaMemcpyAsync(state.hostSums, state.deviceSums, sizeof(DeviceChecksumSums),
                                   cudaMemcpyDeviceToHost, state.copyStream));
    WSYNC_CUDA_TRY(cudaEventRecord(state.copyFinished, state.copyStream));
    WSYNC_CUDA_TRY(cudaEventRecord(state.commFinished, state.commStream));
    return {};
  };
  if (auto enqueued = enqueue(); !enqueued) return failed(enqueued.error());

  // The watchdog: progress is a bucket finishing on this rank.
  std::uint32_t nextBucket = 0;
  std::uint64_t bytesDone = 0;
  auto lastProgress = Clock::now();
  while (true) {
    const std::uint32_t firstPending = nextBucket;
    while (nextBucket < plan.bucketCount() && cudaEventQuery(state.bucketDone[nextBucket]) == cudaSuccess) {
      for (const Piece& piece : plan.piecesOfBucket(nextBucket)) bytesDone += piece.bytes;
      ++nextBucket;
      lastProgress = Clock::now();
    }
    if (nextBucket != firstPending) reportProgress(bytesDone);
    if (nextBucket == plan.bucketCount() && cudaEventQuery(state.copyFinished) == cudaSuccess &&
        cudaEventQuery(state.commFinished) == cudaSuccess) {
      break;
    }
    if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess && error != cudaErrorNotReady) {
      return failed(detail::cudaFailure("transfer", error));
    }
    ncclResult_t asyncError = ncclSuccess;
    state.nccl->commGetAsyncError(state.comm, &asyncError);
    if (asyncError != ncclSuccess && asyncError != ncclInProgress) {
      return failed(ncclFailure(*state.nccl, state.comm, "broadcast", asyncError));
    }
    const auto now = Clock::now();
    if (cancel_ && cancel_()) {
      return failed(ChannelFailure{ChannelError::Aborted, "cancelled after " + std::to_string(nextBucket) + " of " +
                                                              std::to_string(plan.bucketCount()) + " buckets"});
    }
    if (now > deadline) {
      return failed(ChannelFailure{ChannelError::Timeout, "deadline passed after " + std::to_string(nextBucket) +
                                                              " of " + std::to_string(plan.bucketCount()) + " buckets"});
    }
    if (now - lastProgress > config_.stallTimeout) {
      return failed(ChannelFailure{
          ChannelError::Timeout,
          "no bucket finished for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(config_.stallTimeout).count()) +
              " ms (bucket " + std::to_string(nextBucket) + " of " + std::to_string(plan.bucketCount()) +
              "): a peer is dead or stuck"});
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return TransferResult{.bytes = state.totalBytes, .digest = finishDeviceChecksum(*state.hostSums, state.totalBytes)};
}

}  // namespace wsync::bus::gpu
