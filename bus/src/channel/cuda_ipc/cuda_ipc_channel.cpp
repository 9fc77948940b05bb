#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <boost/interprocess/shared_memory_object.hpp>

#include "channel/cuda_ipc/ipc_segment.hpp"
#include "channel/gpu/copy_reporter.hpp"
#include "channel/gpu/copy_table.hpp"
#include "channel/gpu/cuda_check.hpp"
#include "core/private_segment.hpp"
#include "wsync/bus/core/shared_futex.hpp"
#include "wsync/bus/protocol/client_text.hpp"

namespace wsync::bus::gpu {
namespace bip = boost::interprocess;
using namespace ipc;  // the segment's parts (ipc_segment.hpp), shared with cuda_ipc_regions.cpp

tl::expected<std::unique_ptr<CudaIpcSegment>, ChannelFailure> CudaIpcSegment::create(const std::string& name,
                                                                                     const IpcGeometry& geometry) {
  if (geometry.maxReceivers == 0 || geometry.maxReceivers > kMaxIpcReceivers || geometry.maxAllocations == 0 ||
      geometry.maxTensors == 0) {
    return fail(ChannelError::InvalidGeometry, "cuda_ipc segment: 1 to " + std::to_string(kMaxIpcReceivers) +
                                                   " receivers and at least one allocation and tensor");
  }
  const std::uint64_t bytes = segmentBytes(geometry);
  try {
    bip::shared_memory_object::remove(name.c_str());
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, bip::permissions(0600));
    shm.truncate(static_cast<bip::offset_t>(bytes));
    bip::mapped_region region(shm, bip::read_write, 0, bytes);
    auto& header = control(region).header;
    header.layoutVersion = kIpcLayoutVersion;
    header.maxReceivers = geometry.maxReceivers;
    header.maxAllocations = geometry.maxAllocations;
    header.maxTensors = geometry.maxTensors;
    header.allocationsOffset = controlBytes();
    header.tensorsOffset = controlBytes() + std::uint64_t{geometry.maxAllocations} * sizeof(IpcAllocationData);
    header.segmentBytes = bytes;
    header.magic.store(kIpcMagic, std::memory_order_release);  // publishes the segment
    return std::unique_ptr<CudaIpcSegment>(new CudaIpcSegment(std::move(region), name));
  } catch (const bip::interprocess_exception& e) {
    return fail(ChannelError::SystemError, name + ": " + e.what());
  }
}

CudaIpcSegment::~CudaIpcSegment() { bip::shared_memory_object::remove(name_.c_str()); }

void CudaIpcSegment::abort(std::uint64_t transfer) {
  auto& data = control(region_);
  data.header.abortedTransfer.store(transfer, std::memory_order_release);
  // Wake whoever sleeps: receivers on the sender's word, the sender on the receivers'.
  data.sender.notify.fetch_add(1, std::memory_order_release);
  wakeAll(data.sender.notify);
  for (auto& receiver : data.receivers) {
    receiver.notify.fetch_add(1, std::memory_order_release);
    wakeAll(receiver.notify);
  }
}

tl::expected<std::unique_ptr<CudaIpcChannel>, ChannelFailure> CudaIpcChannel::open(const std::string& name) {
  bip::mapped_region region;
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    auto size = bus::detail::privateSegmentSize(shm, name);
    if (!size) return fail(size.error().unsafe ? ChannelError::Unsafe : ChannelError::SystemError, size.error().detail);
    if (*size < controlBytes())
      return fail(ChannelError::LayoutMismatch, name + " is too small for a cuda_ipc segment");
    region = bip::mapped_region(shm, bip::read_write, 0, *size);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) return fail(ChannelError::NoArena, "no cuda_ipc segment " + name);
    return fail(ChannelError::SystemError, name + ": " + e.what());
  }
  const auto& header = control(region).header;
  if (header.magic.load(std::memory_order_acquire) != kIpcMagic || header.layoutVersion != kIpcLayoutVersion ||
      header.segmentBytes != region.get_size() ||
      header.segmentBytes != segmentBytes({header.maxReceivers, header.maxAllocations, header.maxTensors})) {
    return fail(ChannelError::LayoutMismatch,
                name + " is not an initialised cuda_ipc segment of layout " + std::to_string(kIpcLayoutVersion));
  }

  auto state = std::make_unique<State>();
  WSYNC_CUDA_TRY(cudaGetDevice(&state->device));
  WSYNC_CUDA_TRY(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
  auto reporter = detail::CopyReporter::create();
  if (!reporter) return tl::unexpected(reporter.error());
  state->reporter = std::move(*reporter);
  // The driver API's address range query, through the runtime (wsync links no libcuda: binaries start without one).
  cudaDriverEntryPointQueryResult found{};
  void* function = nullptr;
  WSYNC_CUDA_TRY(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || function == nullptr) {
    return fail(ChannelError::DeviceError, "the CUDA driver has no cuMemGetAddressRange");
  }
  state->getAddressRange = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(function);
  function = nullptr;
  WSYNC_CUDA_TRY(
      cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &function, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || function == nullptr) {
    return fail(ChannelError::DeviceError, "the CUDA driver has no cuPointerGetAttribute");
  }
  state->getPointerAttribute = reinterpret_cast<PFN_cuPointerGetAttribute_v4000>(function);
  WSYNC_CUDA_TRY(detail::loadCopyKernel());
  return std::unique_ptr<CudaIpcChannel>(new CudaIpcChannel(std::move(region), name, std::move(state)));
}

CudaIpcChannel::CudaIpcChannel(bip::mapped_region region, std::string name, std::unique_ptr<State> state)
    : region_(std::move(region)), name_(std::move(name)), state_(std::move(state)) {}

CudaIpcChannel::~CudaIpcChannel() { cudaSetDevice(state_->device); }

void CudaIpcChannel::releaseImports() {
  cudaSetDevice(state_->device);
  state_->closeImports();
}

std::uint32_t CudaIpcChannel::openedHandles() const { return static_cast<std::uint32_t>(state_->imports.size()); }

std::uint64_t CudaIpcChannel::exportGeneration() const {
  // A channel is either the sender (what it wrote) or a receiver (what it imported).
  return std::max(state_->generation, state_->importedGeneration) / 2;
}

const IpcRoundTiming& CudaIpcChannel::lastTiming() const { return state_->timing; }

void CudaIpcChannel::setSpinWait(std::chrono::microseconds spin) { state_->spinWait = spin; }

void CudaIpcChannel::setTimeline(bool on) {
  State& state = *state_;
  if (!on) {
    for (cudaEvent_t* event : {&state.copyBegin, &state.copyEnd}) {
      if (*event != nullptr) cudaEventDestroy(*event);
      *event = nullptr;
    }
    return;
  }
  cudaSetDevice(state.device);
  for (cudaEvent_t* event : {&state.copyBegin, &state.copyEnd}) {
    // Without them the round is timed on the host alone (copyGpuMs stays 0).
    if (*event == nullptr && cudaEventCreate(event) != cudaSuccess) *event = nullptr;
  }
}

ChannelMemory CudaIpcChannel::memory() const {
  return ChannelMemory{.bufferBytes = 0, .tableBytes = state_->table.deviceBytes() + sizeof(DeviceChecksumSums)};
}

namespace {

// What a sender writes into the segment's tables when it exports: each exported block and each tensor's place.
struct ExportTables {
  std::vector<IpcAllocationData> allocations;
  std::vector<CudaIpcChannel::State::Exported> blocks;  // the same blocks, as the sender checks them later
  std::vector<IpcTensorData> tensors;
  std::uint64_t totalBytes = 0;
};

// Each tensor's cudaMalloc block found, and each block exported once (cudaIpcGetMemHandle).
tl::expected<ExportTables, ChannelFailure> describeExport(const CudaIpcChannel::State& state,
                                                          std::span<const std::span<const std::byte>> tensors,
                                                          std::uint32_t maxAllocations) {
  ExportTables tables;
  tables.tensors.resize(tensors.size());
  std::map<std::uint64_t, std::uint32_t> allocationOf;  // base -> index
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const auto& tensor = tensors[index];
    tables.totalBytes += tensor.size();
    if (tensor.empty()) {
      tables.tensors[index] = IpcTensorData{.allocation = kNoAllocation, .reserved = 0, .offset = 0, .bytes = 0};
      continue;
    }
    CUdeviceptr base = 0;
    std::size_t size = 0;
    const auto address = reinterpret_cast<CUdeviceptr>(tensor.data());
    if (state.getAddressRange(&base, &size, address) != CUDA_SUCCESS || address + tensor.size() > base + size) {
      return fail(ChannelError::PlanMismatch,
                  "tensor " + std::to_string(index) + " is not inside one device allocation of this process");
    }
    auto [slot, added] = allocationOf.try_emplace(base, static_cast<std::uint32_t>(tables.allocations.size()));
    if (added) {
      if (tables.allocations.size() >= maxAllocations) {
        return fail(ChannelError::InvalidGeometry,
                    "more than " + std::to_string(maxAllocations) + " device allocations to export");
      }
      cudaIpcMemHandle_t handle{};
      if (const cudaError_t error = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)); error != cudaSuccess) {
        return fail(ChannelError::DeviceError,
                    "tensor " + std::to_string(index) + "'s memory cannot be exported with CUDA IPC (" +
                        cudaGetErrorString(error) +
                        "): it must come from cudaMalloc, not cudaMallocAsync pools or the virtual memory API "
                        "(PyTorch: expandable_segments off)");
      }
      IpcAllocationData entry{};
      std::memcpy(entry.handle, &handle, sizeof(handle));
      entry.bytes = size;
      entry.senderBase = base;
      tables.allocations.push_back(entry);
      tables.blocks.push_back(CudaIpcChannel::State::Exported{.base = base, .bufferId = state.bufferId(base)});
    }
    tables.tensors[index] =
        IpcTensorData{.allocation = slot->second, .reserved = 0, .offset = address - base, .bytes = tensor.size()};
  }
  return tables;
}

// The tables written into the segment under its seqlock generation.
void writeExport(CudaIpcChannel::State& state, const bip::mapped_region& region, const ExportTables& tables) {
  IpcSenderData& sender = control(region).sender;
  // Generations count per segment, not per sender: a trainer that replaces another (a new process on the same
  // bus) goes on from the last one's, so that a receiver which imported the old tables under generation N never
  // takes the new ones for them and copies on out of the old process's memory. Rounded up to even past a
  // sender that died half-way through a write.
  const std::uint64_t segmentGeneration = sender.generation.load(std::memory_order_acquire);
  state.generation = std::max(state.generation, (segmentGeneration + 1) & ~std::uint64_t{1});
  // A seqlock write: odd while the tables change, so a receiver that reads across it sees the change.
  sender.generation.store(state.generation + 1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  std::copy(tables.allocations.begin(), tables.allocations.end(), allocations(region));
  std::copy(tables.tensors.begin(), tables.tensors.end(), tensorTable(region));
  sender.allocationCount = static_cast<std::uint32_t>(tables.allocations.size());
  sender.tensorCount = static_cast<std::uint32_t>(tables.tensors.size());
  sender.senderPid = static_cast<std::uint32_t>(::getpid());
  sender.senderDevice = state.device;
  sender.totalBytes = tables.totalBytes;
  sender.processToken = processToken();
  state.generation += 2;
  sender.generation.store(state.generation, std::memory_order_release);
}

}  // namespace

tl::expected<TransferResult, ChannelFailure> CudaIpcChannel::send(std::uint64_t transfer, const BucketPlan& plan,
                                                                  std::span<const std::span<const std::byte>> tensors,
                                                                  std::uint32_t receiverCount,
                                                                  Clock::time_point deadline) {
  (void)plan;  // nothing is staged: receivers copy tensor by tensor, whatever the bucket layout
  State& state = *state_;
  state.timing = IpcRoundTiming{.sendCalled = monotonicNs()};
  IpcControlData& data = control(region_);
  const IpcHeaderData& header = data.header;
  if (receiverCount == 0 || receiverCount > header.maxReceivers) {
    return fail(ChannelError::InvalidGeometry, std::to_string(receiverCount) + " receivers: the segment has room for " +
                                                   std::to_string(header.maxReceivers));
  }
  if (tensors.size() > header.maxTensors) {
    return fail(ChannelError::InvalidGeometry, std::to_string(tensors.size()) + " tensors: the segment has room for " +
                                                   std::to_string(header.maxTensors));
  }
  WSYNC_CUDA_TRY(cudaSetDevice(state.device));
  if (auto exported = exportTensors(tensors); !exported) return tl::unexpected(exported.error());
  state.timing.exportChecked = monotonicNs();
  publish(data.sender.readyTransfer, data.sender.notify, transfer);
  state.timing.published = monotonicNs();
  std::vector<std::uint32_t> receivers(receiverCount);
  for (std::uint32_t index = 0; index < receiverCount; ++index) receivers[index] = index;
  if (auto copied = waitForReceivers(transfer, receivers, deadline); !copied) {
    return tl::unexpected(copied.error());
  }
  state.timing.allCopied = monotonicNs();
  return agreedResult(transfer, receiverCount);
}

tl::expected<void, ChannelFailure> CudaIpcChannel::exportTensors(std::span<const std::span<const std::byte>> tensors) {
  State& state = *state_;
  // Export again only when a tensor moved or its block was freed and allocated again (same address, new block):
  // trainers keep their parameters where they are, so this runs once. The second costs a driver query per block,
  // skipped when the caller vouches that nothing was freed (setAllocationsKept).
  const Digest tensorsKey = layoutKeyOf(tensors);
  if (state.exportKey == tensorsKey && (allocationsKept() || state.exportStillValid())) return {};
  auto tables = describeExport(state, tensors, control(region_).header.maxAllocations);
  if (!tables) return tl::unexpected(tables.error());
  writeExport(state, region_, *tables);
  state.exportKey = tensorsKey;
  state.exported = std::move(tables->blocks);
  state.totalBytes = tables->totalBytes;
  return {};
}

tl::expected<void, ChannelFailure> CudaIpcChannel::waitForReceivers(std::uint64_t transfer,
                                                                    std::span<const std::uint32_t> receivers,
                                                                    Clock::time_point deadline) {
  const State& state = *state_;
  IpcControlData& data = control(region_);
  const IpcHeaderData& header = data.header;
  // Done or failed, unless aborted, cancelled or late.
  std::size_t done = 0;
  const auto waitStarted = Clock::now();
  while (done < receivers.size()) {
    const std::uint32_t finished = receivers[done];
    IpcReceiverData& receiver = data.receivers[finished];
    const std::uint32_t seen = receiver.notify.load(std::memory_order_acquire);
    if (receiver.doneTransfer.load(std::memory_order_acquire) == transfer) {
      ++done;
      continue;
    }
    if (receiver.failedTransfer.load(std::memory_order_acquire) == transfer) {
      return fail(ChannelError::Aborted,
                  receiverName(receiver, finished, transfer) + " failed transfer " + std::to_string(transfer));
    }
    if (header.abortedTransfer.load(std::memory_order_acquire) == transfer) {
      return fail(ChannelError::Aborted, "transfer " + std::to_string(transfer) + " aborted by the segment's owner");
    }
    if (cancel_ && cancel_()) {
      return fail(ChannelError::Aborted, "cancelled while " + receiverName(receiver, finished, transfer) + " copied");
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return fail(ChannelError::Timeout, receiverName(receiver, finished, transfer) + " did not finish in time");
    }
    if (now - waitStarted < state.spinWait) {
      std::this_thread::yield();
      continue;
    }
    (void)waitWhileEqual(receiver.notify, seen, std::min<Clock::duration>(kWaitSlice, deadline - now));
  }
  return {};
}

tl::expected<TransferResult, ChannelFailure> CudaIpcChannel::agreedResult(std::uint64_t transfer,
                                                                          std::uint32_t receiverCount) {
  const IpcControlData& data = control(region_);
  const IpcReceiverData& first = data.receivers[0];
  for (std::uint32_t index = 1; index < receiverCount; ++index) {
    const IpcReceiverData& other = data.receivers[index];
    if (other.digestLo != first.digestLo || other.digestHi != first.digestHi || other.bytes != first.bytes) {
      return fail(ChannelError::DigestMismatch, receiverName(first, 0, transfer) + " and " +
                                                    receiverName(other, index, transfer) +
                                                    " read different bytes from the sender");
    }
  }
  if (first.bytes != state_->totalBytes) {
    return fail(ChannelError::DigestMismatch,
                "receivers copied " + std::to_string(first.bytes) + " bytes of " + std::to_string(state_->totalBytes));
  }
  reportProgress(first.bytes);  // one copy launch per version: nothing to report before its end
  return TransferResult{.bytes = first.bytes, .digest = Digest{.lo = first.digestLo, .hi = first.digestHi}};
}

tl::expected<TransferResult, ChannelFailure> CudaIpcChannel::receive(std::uint64_t transfer, const BucketPlan& plan,
                                                                     std::span<const std::span<std::byte>> tensors,
                                                                     std::uint32_t receiver,
                                                                     Clock::time_point deadline) {
  State& state = *state_;
  IpcControlData& data = control(region_);
  if (receiver >= data.header.maxReceivers) {
    return fail(ChannelError::InvalidGeometry,
                "receiver " + std::to_string(receiver) + " of " + std::to_string(data.header.maxReceivers));
  }
  IpcReceiverData& slot = data.receivers[receiver];
  slot.pid = static_cast<std::uint32_t>(::getpid());
  nameReceiver(slot, agentId_, transfer);
  state.timing = IpcRoundTiming{.receiveCalled = monotonicNs()};
  // From here on the sender waits for this slot: a failure is published there.
  auto failed = [&](ChannelFailure failure) -> tl::expected<TransferResult, ChannelFailure> {
    publish(slot.failedTransfer, slot.notify, transfer);
    return tl::unexpected(std::move(failure));
  };
  if (const cudaError_t error = cudaSetDevice(state.device); error != cudaSuccess) {
    return failed(detail::cudaFailure("cudaSetDevice", error));
  }
  // Before the wait, which it would otherwise lengthen: whether this receiver's tensors are the table's.
  const Digest tensorsKey = layoutKeyOf(tensors);
  if (auto published = waitForSender(transfer, deadline); !published) return failed(published.error());
  state.timing.sawPublished = monotonicNs();
  auto generation = importExport();
  if (!generation) return failed(generation.error());
  if (auto built = buildTable(plan, tensors, tensorsKey, *generation); !built) return failed(built.error());
  const detail::CopyReport report = state.reporter.next();
  if (auto launched = launchCopy(report); !launched) return failed(launched.error());
  state.timing.launched = monotonicNs();
  auto sums = waitForCopy(state.reporter, report);
  if (!sums) return failed(sums.error());
  state.reporterClean = true;
  state.timing.copied = monotonicNs();
  return reportCopy(slot, transfer, *sums);
}

tl::expected<void, ChannelFailure> CudaIpcChannel::waitForSender(std::uint64_t transfer, Clock::time_point deadline) {
  const State& state = *state_;
  const IpcControlData& data = control(region_);
  const auto waitStarted = Clock::now();
  while (true) {
    const std::uint32_t seen = data.sender.notify.load(std::memory_order_acquire);
    const std::uint64_t ready = data.sender.readyTransfer.load(std::memory_order_acquire);
    if (ready == transfer) return {};
    if (data.header.abortedTransfer.load(std::memory_order_acquire) == transfer) {
      return fail(ChannelError::Aborted, "transfer " + std::to_string(transfer) + " aborted by the segment's owner");
    }
    if (cancel_ && cancel_()) return fail(ChannelError::Aborted, "cancelled while waiting for the sender");
    const auto now = Clock::now();
    if (now >= deadline) return fail(ChannelError::Timeout, "the sender did not publish in time");
    if (now - waitStarted < state.spinWait) {
      std::this_thread::yield();
      continue;
    }
    (void)waitWhileEqual(data.sender.notify, seen, std::min<Clock::duration>(kWaitSlice, deadline - now));
  }
}

tl::expected<std::uint64_t, ChannelFailure> CudaIpcChannel::importExport() {
  State& state = *state_;
  const IpcControlData& data = control(region_);
  const std::uint64_t generation = data.sender.generation.load(std::memory_order_acquire);
  if (generation % 2 != 0 || generation == 0) {
    return fail(ChannelError::SystemError, "the sender's export is being rewritten");
  }
  if (generation == state.importedGeneration) return generation;
  const std::uint32_t count = data.sender.allocationCount;
  if (count > data.header.maxAllocations) return fail(ChannelError::LayoutMismatch, "allocation count out of range");
  std::vector<HandleBytes> handles(count);
  for (std::uint32_t index = 0; index < count; ++index) {
    std::memcpy(handles[index].data(), allocations(region_)[index].handle, kIpcHandleBytes);
  }
  state.closeImportsNotIn(handles);
  // A sender in this process (a trainer and its engine in one process, as verl's hybrid engine runs them): CUDA
  // opens no handle in the process that made it, and needs none; its memory is this process's already.
  const bool sameProcess =
      data.sender.processToken == processToken() && data.sender.senderPid == static_cast<std::uint32_t>(::getpid());
  if (sameProcess && data.sender.senderDevice != state.device) {
    if (auto reachable = reachSenderDevice(); !reachable) {
      state.importedGeneration = 0;
      return tl::unexpected(reachable.error());
    }
  }
  auto importOf = openImports(handles, sameProcess);
  if (!importOf) {
    state.importedGeneration = 0;
    return tl::unexpected(importOf.error());
  }
  state.importOf = std::move(*importOf);
  if (data.sender.generation.load(std::memory_order_acquire) != generation) {
    state.importedGeneration = 0;
    return fail(ChannelError::SystemError, "the sender's export changed while it was read");
  }
  state.importedGeneration = generation;
  state.tableGeneration = 0;
  return generation;
}

tl::expected<void, ChannelFailure> CudaIpcChannel::reachSenderDevice() {
  const State& state = *state_;
  const int senderDevice = control(region_).sender.senderDevice;
  const cudaError_t error = cudaDeviceEnablePeerAccess(senderDevice, 0);
  // Already enabled (an earlier export, or the process's own code) is success, but CUDA records it as the last
  // error, which the next launch's check would then report as its own: taken off here.
  if (error != cudaSuccess) cudaGetLastError();
  if (error != cudaSuccess && error != cudaErrorPeerAccessAlreadyEnabled) {
    return fail(ChannelError::DeviceError, "the sender (this process, GPU " + std::to_string(senderDevice) +
                                               ") cannot be read from GPU " + std::to_string(state.device) + ": " +
                                               cudaGetErrorString(error));
  }
  return {};
}

tl::expected<std::vector<void*>, ChannelFailure> CudaIpcChannel::openImports(std::span<const HandleBytes> handles,
                                                                             bool sameProcess) {
  State& state = *state_;
  std::vector<void*> importOf(handles.size(), nullptr);
  for (std::size_t index = 0; index < handles.size(); ++index) {
    if (sameProcess) {
      importOf[index] = reinterpret_cast<void*>(allocations(region_)[index].senderBase);
      continue;
    }
    if (auto known = state.imports.find(handles[index]); known != state.imports.end()) {
      importOf[index] = known->second;
      continue;
    }
    cudaIpcMemHandle_t raw{};
    std::memcpy(&raw, handles[index].data(), sizeof(raw));
    void* address = nullptr;
    if (const cudaError_t error = cudaIpcOpenMemHandle(&address, raw, cudaIpcMemLazyEnablePeerAccess);
        error != cudaSuccess) {
      // A sender that died or gave up takes its memory with it, and opening its handle then fails: say that
      // the transfer was cancelled, not that CUDA broke.
      if (cancel_ && cancel_()) {
        return fail(ChannelError::Aborted, std::string("cancelled: the sender's memory is gone (") +
                                               cudaGetErrorName(error) + " from cudaIpcOpenMemHandle)");
      }
      return tl::unexpected(detail::cudaFailure("cudaIpcOpenMemHandle", error));
    }
    importOf[index] = address;
    state.imports.emplace(handles[index], address);
  }
  return importOf;
}

tl::expected<void, ChannelFailure> CudaIpcChannel::buildTable(const BucketPlan& plan,
                                                              std::span<const std::span<std::byte>> tensors,
                                                              const Digest& tensorsKey, std::uint64_t generation) {
  State& state = *state_;
  if (state.tableKey == tensorsKey && generation == state.tableGeneration) return {};
  state.tableGeneration = 0;
  const IpcSenderData& sender = control(region_).sender;
  if (sender.tensorCount != tensors.size()) {
    return fail(ChannelError::PlanMismatch, "the sender exported " + std::to_string(sender.tensorCount) +
                                                " tensors, this receiver has " + std::to_string(tensors.size()));
  }
  std::uint64_t total = 0;
  state.table.clear();
  state.table.beginBatch();
  const IpcTensorData* entries = tensorTable(region_);
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const IpcTensorData entry = entries[index];
    std::uint64_t planned = 0;
    for (const Piece& piece : plan.piecesOfTensor(static_cast<std::uint32_t>(index))) planned += piece.bytes;
    if (entry.bytes != tensors[index].size() || planned != entry.bytes) {
      return fail(ChannelError::PlanMismatch, "tensor " + std::to_string(index) + ": the sender has " +
                                                  std::to_string(entry.bytes) + " bytes, the plan " +
                                                  std::to_string(planned) + ", this receiver " +
                                                  std::to_string(tensors[index].size()));
    }
    total += entry.bytes;
    if (entry.bytes == 0) continue;
    if (entry.allocation >= state.importOf.size()) {
      return fail(ChannelError::LayoutMismatch, "tensor " + std::to_string(index) + " names no allocation");
    }
    state.table.add(reinterpret_cast<std::uint64_t>(state.importOf[entry.allocation]) + entry.offset,
                    reinterpret_cast<std::uint64_t>(tensors[index].data()), entry.bytes,
                    static_cast<std::uint32_t>(index), 0);
  }
  if (auto uploaded = state.table.upload(); !uploaded) return uploaded;
  state.tableKey = tensorsKey;
  state.tableGeneration = generation;
  state.totalBytes = total;
  return {};
}

tl::expected<void, ChannelFailure> CudaIpcChannel::launchCopy(const detail::CopyReport& report) {
  State& state = *state_;
  // One submission: the kernel, which reports its own end (CopyReporter). Timing events only with the timeline.
  if (!state.reporterClean) {
    if (auto reset = state.reporter.reset(state.stream); !reset) return reset;
    state.reporterClean = true;
  }
  if (state.copyBegin != nullptr) WSYNC_CUDA_TRY(cudaEventRecord(state.copyBegin, state.stream));
  state.reporterClean = false;
  if (auto launched = state.table.launch(0, state.reporter.deviceSums(), report, kCopyBlocks, state.stream);
      !launched) {
    return tl::unexpected(launched.error());
  }
  if (state.copyEnd != nullptr) WSYNC_CUDA_TRY(cudaEventRecord(state.copyEnd, state.stream));
  return {};
}

tl::expected<DeviceChecksumSums, ChannelFailure> CudaIpcChannel::waitForCopy(const detail::CopyReporter& reporter,
                                                                             const detail::CopyReport& report) {
  State& state = *state_;
  // The copy takes milliseconds while the engine is paused, and the round waits for its end: the thread reads the
  // report in a loop, yielding the core in between, where a sleep's wake-up (often twice what was asked on a VM)
  // would add to every round. The stream is asked too, now and then, for a kernel that failed and so never
  // reports. A cancel cannot stop the kernel, so nothing else is asked here: the copy ends by itself, its source
  // kept alive by the open handles.
  std::optional<DeviceChecksumSums> sums;
  auto lastCheck = Clock::now();
  while (!(sums = reporter.reported(report))) {
    if (Clock::now() - lastCheck < kStreamCheckInterval) {
      std::this_thread::yield();
      continue;
    }
    lastCheck = Clock::now();
    const cudaError_t status = cudaStreamQuery(state.stream);
    if (status == cudaSuccess) {
      // Everything enqueued ran, so the report (fenced before the kernel's end) is there if the kernel made it.
      sums = reporter.reported(report);
      if (!sums) return fail(ChannelError::DeviceError, "the copy kernel ended without reporting");
      break;
    }
    if (status != cudaErrorNotReady) return tl::unexpected(detail::cudaFailure("copy from the sender", status));
    std::this_thread::yield();
  }
  return *sums;
}

tl::expected<TransferResult, ChannelFailure> CudaIpcChannel::reportCopy(IpcReceiverData& slot, std::uint64_t transfer,
                                                                        const DeviceChecksumSums& sums) {
  State& state = *state_;
  const Digest digest = finishDeviceChecksum(sums, state.totalBytes);
  slot.bytes = state.totalBytes;
  slot.digestLo = digest.lo;
  slot.digestHi = digest.hi;
  publish(slot.doneTransfer, slot.notify, transfer);
  state.timing.reported = monotonicNs();
  if (state.copyBegin != nullptr && state.copyEnd != nullptr) {
    float milliseconds = 0;
    if (cudaEventElapsedTime(&milliseconds, state.copyBegin, state.copyEnd) == cudaSuccess) {
      state.timing.copyGpuMs = milliseconds;
    }
  }
  reportProgress(state.totalBytes);
  return TransferResult{.bytes = state.totalBytes, .digest = digest};
}

}  // namespace wsync::bus::gpu
