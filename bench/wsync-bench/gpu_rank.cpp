// The rank processes of `wsync-bench gpu` (gpu.hpp).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp>
#include <wsync/bus/channel/device_block.hpp>
#include <wsync/bus/channel/gpu/gpu_runtime.hpp>
#include <wsync/bus/channel/nccl/nccl_channel.hpp>
#include <wsync/bus/channel/nccl/nccl_library.hpp>

#include "bench_failure.hpp"
#include "gpu.hpp"
#include "gpu_rank_protocol.hpp"
#include "line_pipe.hpp"
#include "tensor_memory.hpp"

namespace wsync::bench {

cudaError_t launchContentFill(void* data, std::uint64_t bytes, std::uint64_t seed, std::uint32_t tensor,
                              std::uint64_t version, cudaStream_t stream);  // device_content.cu
cudaError_t launchStep(std::uint32_t* word, cudaStream_t stream);           // device_content.cu

namespace {

// cudaMalloc found too little memory: the measurement is skipped, not the run failed.
struct DeviceMemoryShort : BenchFailure {
  using BenchFailure::BenchFailure;
};

void throwIfCudaFailed(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return;
  cudaGetLastError();  // a failed call leaves a non-sticky error behind: clear it for the next check
  throw BenchFailure(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

// A zeroed bus::DeviceBlock of `bytes` on `device`, which stays current.
bus::DeviceBlock allocateDevice(int device, std::uint64_t bytes, const std::string& what) {
  auto block = bus::DeviceBlock::allocate(device, bytes);
  if (block) return std::move(*block);
  // A failed cudaMalloc leaves its error as the runtime's last one: out of memory is a skip, anything else a failure.
  if (cudaGetLastError() != cudaErrorMemoryAllocation) throw BenchFailure(what + ": " + block.error());
  std::size_t free = 0;
  std::size_t total = 0;
  cudaMemGetInfo(&free, &total);
  throw DeviceMemoryShort("cudaMalloc of " + std::to_string(bytes) + " bytes for " + what + " on GPU " +
                          std::to_string(device) + ": out of memory (" + std::to_string(free >> 20) + " MiB free of " +
                          std::to_string(total >> 20) + " MiB)");
}

std::uint64_t roundUp(std::uint64_t value, std::uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A model's tensors on the current device: one cudaMalloc each (a loader without a caching allocator), or with
// `torch` PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp, no expandable segments): sizes rounded
// up to 512 bytes, up to 1 MiB from 2 MiB segments, up to 10 MiB from 20 MiB ones, larger ones rounded to 2 MiB.
class DeviceTensors {
 public:
  DeviceTensors(const bus::Manifest& manifest, bool torch) {
    int device = 0;
    throwIfCudaFailed(cudaGetDevice(&device), "cudaGetDevice");
    struct Segment {
      std::byte* base = nullptr;
      std::uint64_t used = 0;
      std::uint64_t capacity = 0;
    } small, large;  // the segments the two pools carve their blocks from
    for (std::size_t index = 0; index < manifest.size(); ++index) {
      const std::uint64_t bytes = manifest.tensorBytes(index);
      const std::string what = "tensor " + std::to_string(index) + " (" + manifest.tensors()[index].name + ")";
      const std::uint64_t rounded = roundUp(bytes, 512);
      if (bytes == 0) {
        tensors_.emplace_back();
      } else if (!torch || rounded >= (std::uint64_t{10} << 20)) {
        blocks_.push_back(allocateDevice(device, torch ? roundUp(rounded, std::uint64_t{2} << 20) : bytes, what));
        tensors_.emplace_back(blocks_.back().data(), bytes);
      } else {
        Segment& pool = rounded <= (std::uint64_t{1} << 20) ? small : large;
        if (pool.base == nullptr || pool.capacity - pool.used < rounded) {
          const std::uint64_t segment = std::uint64_t{&pool == &small ? 2U : 20U} << 20;
          blocks_.push_back(allocateDevice(device, segment, what));
          pool = Segment{blocks_.back().data(), 0, segment};
        }
        tensors_.emplace_back(pool.base + pool.used, bytes);
        pool.used += rounded;
      }
    }
    constTensors_.assign(tensors_.begin(), tensors_.end());
  }

  std::span<const std::span<std::byte>> tensors() const { return tensors_; }
  std::span<const std::span<const std::byte>> constTensors() const { return constTensors_; }
  std::size_t allocationCount() const { return blocks_.size(); }

  void enqueueFill(std::uint64_t seed, std::uint64_t version, cudaStream_t stream) const {
    for (std::size_t index = 0; index < tensors_.size(); ++index) {
      throwIfCudaFailed(launchContentFill(tensors_[index].data(), tensors_[index].size(), seed,
                                          static_cast<std::uint32_t>(index), version, stream),
                        "filling tensor " + std::to_string(index));
    }
  }

 private:
  std::vector<bus::DeviceBlock> blocks_;
  std::vector<std::span<std::byte>> tensors_;
  std::vector<std::span<const std::byte>> constTensors_;
};

// Connects the raw communicator before anything is measured (NCCL connects at the first collective).
constexpr std::uint64_t kConnectBroadcastBytes = std::uint64_t{64} << 20;

std::uint64_t freeMemory() {
  std::size_t free = 0;
  std::size_t total = 0;
  throwIfCudaFailed(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

// Commands come on stdin; reports leave on a copy of the original stdout, and stdout itself points at stderr, so
// that what a library prints (NCCL_DEBUG=INFO) cannot garble a report.
class CommandLink {
 public:
  CommandLink() : pipe_(STDIN_FILENO, ::dup(STDOUT_FILENO)) {
    if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      throw BenchFailure(std::string("cannot set up the report descriptor: ") + std::strerror(errno));
    }
  }

  std::string next(std::chrono::milliseconds timeout) {
    if (auto line = pipe_.readLine(timeout)) return *line;
    if (pipe_.ended()) throw BenchFailure("the benchmark closed the command socket");
    throw BenchFailure("no command for " + std::to_string(timeout.count()) + " ms: the benchmark is gone or stuck");
  }

  void report(const std::string& name, RankLine fields = RankLine::object()) {
    fields["report"] = name;
    pipe_.writeLine(fields.dump());
  }

 private:
  LinePipe pipe_;
};

// The least free device memory while the channel is open: sampled every kMemorySampleInterval and after transfers.
class FreeMemorySampler {
 public:
  explicit FreeMemorySampler(int device)
      : minimum_(freeMemory()), thread_([this, device](const std::stop_token& stop) {
          if (cudaSetDevice(device) != cudaSuccess) return;
          for (std::size_t free = 0, total = 0; !stop.stop_requested();
               std::this_thread::sleep_for(kMemorySampleInterval)) {
            if (cudaMemGetInfo(&free, &total) == cudaSuccess) lower(free);
          }
        }) {}

  void sample() { lower(freeMemory()); }
  std::uint64_t minimum() const { return minimum_.load(); }

 private:
  void lower(std::uint64_t value) {
    for (std::uint64_t seen = minimum_.load(); value < seen && !minimum_.compare_exchange_weak(seen, value);) {}
  }

  std::atomic<std::uint64_t> minimum_;
  std::jthread thread_;  // last: starts once the rest exists
};

class GpuRank {
 public:
  explicit GpuRank(const GpuRankOptions& options) : options_(options), manifest_(catalogManifest(options.model)) {
    if (options_.channel != "nccl" && options_.channel != "cuda_ipc") {
      throw BenchFailure("unknown channel '" + options_.channel + "'");
    }
    if (options_.world < 2 || options_.rank >= options_.world) {
      throw BenchFailure("rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.world));
    }
  }

  // The channel first (it reads the tensors; the communicator may be flushing), the raw communicator, memory, stream.
  ~GpuRank() {
    sampler_.reset();
    ncclChannel_.reset();
    ipcChannel_.reset();
    if (rawComm_ != nullptr) {
      nccl_->commFinalize(rawComm_);
      nccl_->commDestroy(rawComm_);
    }
    tensors_.reset();
    baselineSource_ = bus::DeviceBlock();
    baselineTarget_ = bus::DeviceBlock();
    if (before_ != nullptr) cudaEventDestroy(before_);
    if (after_ != nullptr) cudaEventDestroy(after_);
    if (stepped_ != nullptr) cudaEventDestroy(stepped_);
    stepWord_ = bus::DeviceBlock();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int run() {
    throwIfCudaFailed(cudaSetDevice(options_.device), "cudaSetDevice(" + std::to_string(options_.device) + ")");
    // The context now, so that its memory is not counted as the tensors'.
    throwIfCudaFailed(cudaFree(nullptr), "creating the CUDA context");
    throwIfCudaFailed(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    throwIfCudaFailed(cudaEventCreate(&before_), "cudaEventCreate");
    throwIfCudaFailed(cudaEventCreate(&after_), "cudaEventCreate");
    throwIfCudaFailed(cudaEventCreate(&stepped_), "cudaEventCreate");
    // Before the tensors, so that it is not counted as theirs.
    stepWord_ = allocateDevice(options_.device, sizeof(std::uint32_t), "the step's word");
    const bool allocated = allocate();
    for (;;) {
      const RankLine command = parseRankLine(link_.next(kRankIdleTimeout), "the benchmark");
      const std::string name = word(command);
      if (name == "quit") return 0;
      if (!allocated) throw BenchFailure("command '" + name + "' after nomemory");
      if (name == "baseline") {
        baseline(unsignedField(command, "bytes"), command.value("nccl_id", ""));
      } else if (name == "open") {
        open(unsignedField(command, "bucket_bytes"), command.value("nccl_id", ""));
      } else if (name == "prepare") {
        prepare(unsignedField(command, "version"));
      } else if (name == "go") {
        go(unsignedField(command, "transfer"), command.at("path").get<std::string>(), signedField(command, "start_ns"));
      } else if (name == "step") {
        step();
      } else if (name == "close") {
        close();
      } else {
        throw BenchFailure("unknown command " + command.dump());
      }
    }
  }

 private:
  bool sender() const { return options_.rank == 0; }
  bool nccl() const { return options_.channel == "nccl"; }

  bool allocate() {
    const std::uint64_t before = freeMemory();
    try {
      tensors_.emplace(manifest_, options_.allocation == "torch");
    } catch (const DeviceMemoryShort& full) {  // emplace() left tensors_ empty
      link_.report("nomemory", {{"why", full.what()}});
      return false;
    }
    throwIfCudaFailed(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    link_.report("allocated",
                 {{"free_before", before}, {"free", freeMemory()}, {"allocations", tensors_->allocationCount()}});
    return true;
  }

  void baseline(std::uint64_t bytes, const std::string& idHex) {
    if (bytes > 0 && nccl()) {
      baselineSource_ = allocateDevice(options_.device, bytes, "the raw broadcast's buffer");
      nccl_ = orThrow(bus::gpu::ncclLibrary(), "NCCL");
      const auto id = orThrow(bus::gpu::ncclUniqueIdFromHex(idHex), "the raw communicator's id");
      ncclUniqueId rawId{};
      std::memcpy(rawId.internal, id.data(), sizeof(rawId.internal));
      throwIfCudaFailed(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      const std::uint64_t beforeCommunicator = freeMemory();
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 1;  // the baseline is plain NCCL as a trainer would call it
      checkNccl(nccl_->commInitRankConfig(&rawComm_, static_cast<int>(options_.world), rawId,
                                          static_cast<int>(options_.rank), &config),
                "ncclCommInitRankConfig (raw)");
      checkNccl(nccl_->broadcast(baselineSource_.data(), baselineSource_.data(),
                                 std::min(bytes, kConnectBroadcastBytes), ncclUint8, 0, rawComm_, stream_),
                "ncclBroadcast (connecting)");
      waitForStream(Clock::now() + kRankSetupTimeout, "the raw communicator's first broadcast");
      const std::uint64_t afterCommunicator = freeMemory();
      communicatorBytes_ = beforeCommunicator > afterCommunicator ? beforeCommunicator - afterCommunicator : 0;
    } else if (bytes > 0 && sender()) {
      baselineSource_ = allocateDevice(options_.device, bytes, "the memcpy's source");
      baselineTarget_ = allocateDevice(options_.baselineDevice, bytes, "the memcpy's destination");
      if (options_.baselineDevice != options_.device) {
        throwIfCudaFailed(cudaSetDevice(options_.device), "cudaSetDevice");
        int reachable = 0;
        throwIfCudaFailed(cudaDeviceCanAccessPeer(&reachable, options_.device, options_.baselineDevice),
                          "cudaDeviceCanAccessPeer");
        // As the channel's receivers do (cudaIpcMemLazyEnablePeerAccess): peer to peer, not through the host.
        if (reachable != 0) {
          const cudaError_t enabled = cudaDeviceEnablePeerAccess(options_.baselineDevice, 0);
          if (enabled != cudaErrorPeerAccessAlreadyEnabled) throwIfCudaFailed(enabled, "cudaDeviceEnablePeerAccess");
          cudaGetLastError();
        }
      }
      enqueueCopy(std::min(bytes, kConnectBroadcastBytes));
      waitForStream(Clock::now() + kRankSetupTimeout, "the first baseline copy");
    }
    baselineBytes_ = bytes;
    throwIfCudaFailed(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    link_.report("baselined", {{"communicator", communicatorBytes_}});
  }

  void open(std::uint64_t bucketBytes, const std::string& idHex) {
    plan_.emplace(orThrow(bus::BucketPlan::build(manifest_, bucketBytes, kPlanAlignment), "plan"));
    const std::uint64_t before = freeMemory();
    if (nccl()) {
      const bus::gpu::NcclChannelConfig config{
          .uniqueId = orThrow(bus::gpu::ncclUniqueIdFromHex(idHex), "the channel's id"),
          .rank = static_cast<std::int32_t>(options_.rank),
          .worldSize = options_.world,
          .bufferCount = options_.ncclBuffers,
          .pollInterval = std::chrono::microseconds(options_.ncclPollMicroseconds),
          .copyBlocks = options_.ncclCopyBlocks,
          .rampCopyBlocks = options_.ncclRampCopyBlocks,
          .firstSliceBytes = options_.ncclFirstSliceBytes,
          .maxSliceBytes = options_.ncclMaxSliceBytes,
          .maxCtas = options_.ncclMaxCtas,
          .enqueue = bus::gpu::ncclEnqueueNamed(options_.ncclEnqueue).value_or(bus::gpu::NcclEnqueue::BlockingChild),
          .timeline = options_.timeline};
      ncclChannel_ =
          orThrow(bus::gpu::NcclChannel::open(config, Clock::now() + kRankSetupTimeout), "NcclChannel::open");
    } else {
      ipcChannel_ = orThrow(bus::gpu::CudaIpcChannel::open(options_.segment), "CudaIpcChannel::open");
      ipcChannel_->setTimeline(options_.timeline);
      ipcChannel_->setSpinWait(std::chrono::microseconds(options_.ipcSpinMicroseconds));
    }
    throwIfCudaFailed(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    sampler_ = std::make_unique<FreeMemorySampler>(options_.device);
    link_.report("opened", {{"free_before", before}, {"free_after", freeMemory()}, {"buckets", plan_->bucketCount()}});
  }

  void prepare(std::uint64_t version) {
    if (sender()) {
      tensors_->enqueueFill(kContentSeed, version, stream_);
      // send() reads the tensors on the channel's own streams: they must be written before it is called.
      waitForStream(Clock::now() + kPrepareTimeout, "writing version " + std::to_string(version));
    }
    link_.report("prepared");
  }

  void go(std::uint64_t transfer, const std::string& path, std::int64_t startNs) {
    if (!plan_) throw BenchFailure("go before open");
    const Clock::time_point start = timeOf(startNs);
    while (Clock::now() < start) {
      // Spin: every rank starts at the same instant, without a wake-up's latency.
    }
    const Clock::time_point begun = Clock::now();
    RankLine fields{{"start", nanosecondsOf(begun)}};
    if (path == kChannelPath) {
      runChannel(transfer, begun, fields);
    } else if (path == kRawPath) {
      runRaw(begun, fields);
    } else {
      throw BenchFailure("unknown path '" + path + "'");
    }
    sampler_->sample();
    fields["min_free"] = sampler_->minimum();
    const bus::ChannelMemory memory = nccl() ? ncclChannel_->memory() : ipcChannel_->memory();
    fields["buffers"] = memory.bufferBytes;
    fields["tables"] = memory.tableBytes;
    if (!nccl()) {
      fields["handles"] = ipcChannel_->openedHandles();
      fields["generation"] = ipcChannel_->exportGeneration();
    }
    link_.report("done", std::move(fields));
  }

  void runChannel(std::uint64_t transfer, Clock::time_point begun, RankLine& fields) {
    bus::Channel& channel = nccl() ? static_cast<bus::Channel&>(*ncclChannel_) : *ipcChannel_;
    const auto deadline = begun + kGpuRoundTimeout;
    channel.setAllocationsKept(options_.allocationsKept);
    // One array for every round (tensors_ never changes): its token can be a constant.
    channel.setLayoutToken(options_.layoutKept ? 1 : 0);
    auto result = sender() ? channel.send(transfer, *plan_, tensors_->constTensors(), options_.world - 1, deadline)
                           : channel.receive(transfer, *plan_, tensors_->tensors(), options_.rank - 1, deadline);
    const auto end = Clock::now();
    if (!result) {
      throw BenchFailure(std::string(sender() ? "send" : "receive") + " of transfer " + std::to_string(transfer) +
                         ": " + result.error().describe());
    }
    fields.update(
        {{"end", nanosecondsOf(end)}, {"bytes", result->bytes}, {"hi", result->digest.hi}, {"lo", result->digest.lo}});
    if (nccl() && options_.timeline) {
      RankLine& slices = fields["timeline"] = RankLine::array();
      for (const bus::NcclSliceTiming& slice : ncclChannel_->timeline()) {
        slices.push_back({slice.bucket, slice.bytes, slice.direct, slice.broadcastBegin, slice.broadcastEnd,
                          slice.copyBegin, slice.copyEnd, slice.callMs, slice.settleMs});
      }
      const bus::NcclHostTiming& host = ncclChannel_->hostTiming();
      fields["host_timing"] = {{"enqueue_begin", host.enqueueBegin},
                               {"enqueue_end", host.enqueueEnd},
                               {"done_seen", host.doneSeen},
                               {"returned", host.returned}};
    }
    if (!nccl() && options_.timeline) {
      const bus::IpcRoundTiming& t = ipcChannel_->lastTiming();
      fields["ipc_timing"] = {{"send_called", t.sendCalled},
                              {"export_checked", t.exportChecked},
                              {"published", t.published},
                              {"all_copied", t.allCopied},
                              {"receive_called", t.receiveCalled},
                              {"saw_published", t.sawPublished},
                              {"launched", t.launched},
                              {"copied", t.copied},
                              {"reported", t.reported},
                              {"copy_gpu_ms", t.copyGpuMs}};
    }
  }

  void runRaw(Clock::time_point begun, RankLine& fields) {
    if (!nccl() && !sender()) {  // the memcpy baseline runs in the sender alone
      fields["end"] = nanosecondsOf(begun);
      return;
    }
    if (baselineBytes_ == 0) throw BenchFailure("a raw round without a baseline");
    const std::uint64_t total = manifest_.totalBytes();
    throwIfCudaFailed(cudaEventRecord(before_, stream_), "cudaEventRecord");
    for (std::uint64_t offset = 0; offset < total; offset += baselineBytes_) {
      const std::uint64_t bytes = std::min(baselineBytes_, total - offset);
      if (nccl()) {
        checkNccl(
            nccl_->broadcast(baselineSource_.data(), baselineSource_.data(), bytes, ncclUint8, 0, rawComm_, stream_),
            "ncclBroadcast (raw)");
      } else {
        enqueueCopy(bytes);
      }
    }
    waitForStream(begun + kGpuRoundTimeout, nccl() ? "the raw broadcast" : "the baseline copy");
    const auto end = Clock::now();
    float milliseconds = 0;
    throwIfCudaFailed(cudaEventElapsedTime(&milliseconds, before_, after_), "cudaEventElapsedTime");
    fields["end"] = nanosecondsOf(end);
    fields["gpu_ns"] = static_cast<std::uint64_t>(static_cast<double>(milliseconds) * 1e6);
  }

  // A receiver runs the engine's next step: one kernel of its own, from its launch until it is seen done, spinning
  // (a sleep's wake-up would be larger than a kernel in a context the GPU already runs). After a cuda_ipc receive,
  // the GPU is in this process's context already; after the memcpy baseline, in the sender's, and this kernel pays
  // the switch, as an engine's first kernel does after a trainer's process wrote its weights.
  void step() {
    if (sender()) {
      link_.report("stepped", {{"step_ns", 0}});
      return;
    }
    const auto launched = Clock::now();
    throwIfCudaFailed(launchStep(reinterpret_cast<std::uint32_t*>(stepWord_.data()), stream_), "launching the step");
    throwIfCudaFailed(cudaEventRecord(stepped_, stream_), "cudaEventRecord");
    for (;;) {
      const cudaError_t status = cudaEventQuery(stepped_);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) throwIfCudaFailed(status, "the step");
      if (Clock::now() - launched > kGpuRoundTimeout) throw BenchFailure("the step did not finish in time");
    }
    const auto done = Clock::now();
    link_.report("stepped",
                 {{"step_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(done - launched).count()}});
  }

  void close() {
    sampler_.reset();
    ncclChannel_.reset();
    ipcChannel_.reset();
    plan_.reset();
    link_.report("closed");
  }

  void enqueueCopy(std::uint64_t bytes) {
    if (options_.baselineDevice == options_.device) {
      throwIfCudaFailed(
          cudaMemcpyAsync(baselineTarget_.data(), baselineSource_.data(), bytes, cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync");
    } else {
      throwIfCudaFailed(cudaMemcpyPeerAsync(baselineTarget_.data(), options_.baselineDevice, baselineSource_.data(),
                                            options_.device, bytes, stream_),
                        "cudaMemcpyPeerAsync");
    }
  }

  void checkNccl(ncclResult_t result, const char* call) const {
    if (result == ncclSuccess) return;
    std::string detail = std::string(call) + ": " + nccl_->getErrorString(result);
    const char* last = nccl_->getLastError(rawComm_);
    if (last != nullptr && *last != '\0') detail += std::string(" (") + last + ")";
    throw BenchFailure(detail);
  }

  // Polls an event recorded behind the work enqueued so far on the stream.
  void waitForStream(Clock::time_point deadline, const std::string& what) const {
    throwIfCudaFailed(cudaEventRecord(after_, stream_), "cudaEventRecord");
    for (;;) {
      const cudaError_t status = cudaEventQuery(after_);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) throwIfCudaFailed(status, what);
      if (Clock::now() > deadline) throw BenchFailure(what + " did not finish in time");
      std::this_thread::sleep_for(kDevicePollInterval);
    }
  }

  GpuRankOptions options_;
  CommandLink link_;
  bus::Manifest manifest_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t before_ = nullptr;
  cudaEvent_t after_ = nullptr;
  cudaEvent_t stepped_ = nullptr;  // behind the step's kernel
  bus::DeviceBlock stepWord_;      // the word the step bumps
  std::optional<DeviceTensors> tensors_;
  bus::DeviceBlock baselineSource_;      // nccl: the raw broadcast's buffer; cuda_ipc sender: the copy's source
  bus::DeviceBlock baselineTarget_;      // cuda_ipc sender: the copy's destination, on the baseline device
  std::uint64_t baselineBytes_ = 0;      // of each buffer: the baseline moves the model's bytes in pieces of this
  std::uint64_t communicatorBytes_ = 0;  // what the raw communicator took of the device, once connected
  const bus::gpu::NcclLibrary* nccl_ = nullptr;
  ncclComm_t rawComm_ = nullptr;
  std::optional<bus::BucketPlan> plan_;
  std::unique_ptr<bus::gpu::NcclChannel> ncclChannel_;
  std::unique_ptr<bus::gpu::CudaIpcChannel> ipcChannel_;
  std::unique_ptr<FreeMemorySampler> sampler_;
};

}  // namespace

int runGpuRank(const GpuRankOptions& options) {
  if (options.ncclNetwork) {
    // Before NCCL reads its environment (at its first call): another host id per rank makes NCCL take the ranks for
    // nodes of their own, which talk through its network transport and may share a GPU.
    ::setenv("NCCL_P2P_DISABLE", "1", 1);
    ::setenv("NCCL_SHM_DISABLE", "1", 1);
    ::setenv("NCCL_HOSTID", ("wsync-bench-rank-" + std::to_string(options.rank)).c_str(), 1);
  }
  std::unique_ptr<GpuRank> rank;
  try {
    rank = std::make_unique<GpuRank>(options);
    const int status = rank->run();
    rank.reset();
    return status;
  } catch (const std::exception& error) {
    std::cerr << "wsync-bench rank " << options.rank << " (" << options.channel << ", GPU " << options.device
              << "): " << error.what() << std::endl;
  }
  // Without the destructors: a communicator whose peer failed may never finish flushing; exiting frees it all.
  std::_Exit(2);
}

}  // namespace wsync::bench
