#pragma once
// Private to the cuda_ipc channel: how its two files (cuda_ipc_channel.cpp, the round of one sender;
// cuda_ipc_regions.cpp, region rounds) reach a segment's parts, and the channel's per-process state.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <boost/interprocess/mapped_region.hpp>

#include "channel/gpu/copy_reporter.hpp"
#include "channel/gpu/copy_table.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp"
#include "wsync/bus/core/shared_futex.hpp"
#include "wsync/bus/protocol/client_text.hpp"

namespace wsync::bus::gpu {
namespace ipc {
namespace bip = boost::interprocess;

using Clock = std::chrono::steady_clock;

static_assert(kIpcHandleBytes == sizeof(cudaIpcMemHandle_t));

// Longest single sleep on a futex word, so a cancel, an abort or a deadline is noticed within it.
inline constexpr std::chrono::milliseconds kWaitSlice{1};
// Blocks of the receiver's copy kernel: every SM, several blocks each, since nothing else shares the work.
inline constexpr std::uint32_t kCopyBlocks = 1024;
// While the receiver waits for its copy's report it asks the stream this often, for a kernel that failed and so
// never reports: between, the wait reads host memory alone (a stream query is a call into the driver).
inline constexpr std::chrono::microseconds kStreamCheckInterval{500};
inline constexpr std::uint32_t kNoAllocation = 0xFFFFFFFFU;

inline std::uint64_t controlBytes() {
  return (sizeof(IpcControlData) + kCacheLineBytes - 1) / kCacheLineBytes * kCacheLineBytes;
}

inline std::uint64_t segmentBytes(const IpcGeometry& geometry) {
  return controlBytes() + std::uint64_t{geometry.maxAllocations} * sizeof(IpcAllocationData) +
         std::uint64_t{geometry.maxTensors} * sizeof(IpcTensorData);
}

inline IpcControlData& control(const bip::mapped_region& region) {
  return *static_cast<IpcControlData*>(region.get_address());
}

inline IpcAllocationData* allocations(const bip::mapped_region& region) {
  return reinterpret_cast<IpcAllocationData*>(static_cast<std::byte*>(region.get_address()) +
                                              control(region).header.allocationsOffset);
}

inline IpcTensorData* tensorTable(const bip::mapped_region& region) {
  return reinterpret_cast<IpcTensorData*>(static_cast<std::byte*>(region.get_address()) +
                                          control(region).header.tensorsOffset);
}

inline void publish(std::atomic<std::uint64_t>& word, std::atomic<std::uint32_t>& notify, std::uint64_t value) {
  word.store(value, std::memory_order_release);
  notify.fetch_add(1, std::memory_order_release);
  wakeAll(notify);
}

inline std::int64_t monotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// This process's IpcSenderData::processToken: drawn once, never 0.
inline std::uint64_t processToken() {
  static const std::uint64_t token = [] {
    std::random_device device;
    std::uint64_t drawn = 0;
    while (drawn == 0) drawn = (std::uint64_t{device()} << 32) ^ device();
    return drawn;
  }();
  return token;
}

// Receiver `index` by the agent id it wrote into its slot for `transfer`, else by index alone (it has not reached
// this transfer, or wrote no name, or one that names no agent: the slot is another process's writing).
inline std::string receiverName(const IpcReceiverData& slot, std::uint32_t index, std::uint64_t transfer) {
  const std::string byIndex = "receiver " + std::to_string(index);
  // Its name from an earlier transfer may be another process's: this slot goes to whoever has this index now.
  if (slot.namedTransfer.load(std::memory_order_acquire) != transfer) return byIndex + " (not yet in this transfer)";
  const std::uint32_t length = slot.agentIdBytes.load(std::memory_order_relaxed);
  std::array<char, kIpcAgentIdWords * 8> bytes{};
  for (std::size_t word = 0; word < kIpcAgentIdWords; ++word) {
    const std::uint64_t value = slot.agentIdWords[word].load(std::memory_order_relaxed);
    std::memcpy(bytes.data() + word * 8, &value, 8);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (slot.namedTransfer.load(std::memory_order_relaxed) != transfer || length > kMaxAgentIdBytes) return byIndex;
  const std::string agentId(bytes.data(), length);
  if (!checkAgentId(agentId).empty()) return byIndex;
  return "receiver '" + agentId + "' (index " + std::to_string(index) + ")";
}

// Receiver's side of receiverName: the name for `transfer`, written before anything of the transfer can fail.
inline void nameReceiver(IpcReceiverData& slot, const std::string& agentId, std::uint64_t transfer) {
  slot.namedTransfer.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::array<char, kIpcAgentIdWords * 8> bytes{};
  const std::size_t length = std::min(agentId.size(), kMaxAgentIdBytes);
  std::memcpy(bytes.data(), agentId.data(), length);
  for (std::size_t word = 0; word < kIpcAgentIdWords; ++word) {
    std::uint64_t value = 0;
    std::memcpy(&value, bytes.data() + word * 8, 8);
    slot.agentIdWords[word].store(value, std::memory_order_relaxed);
  }
  slot.agentIdBytes.store(static_cast<std::uint32_t>(length), std::memory_order_relaxed);
  slot.namedTransfer.store(transfer, std::memory_order_release);
}

}  // namespace ipc

struct CudaIpcChannel::State {
  int device = 0;
  cudaStream_t stream = nullptr;
  // The copy kernel reports its end and its checksum here: a round submits one launch to the GPU.
  detail::CopyReporter reporter;
  bool reporterClean = true;  // false after a launch that may not have run: reset before the next
  IpcRoundTiming timing;
  std::chrono::microseconds spinWait{0};  // setSpinWait
  // setTimeline(true): timing events around the receiver's copy.
  cudaEvent_t copyBegin = nullptr;
  cudaEvent_t copyEnd = nullptr;
  PFN_cuMemGetAddressRange_v3020 getAddressRange = nullptr;
  PFN_cuPointerGetAttribute_v4000 getPointerAttribute = nullptr;

  // Sender: what the tables describe now.
  std::optional<Digest> exportKey;  // layout key of the tensors exported
  struct Exported {
    CUdeviceptr base = 0;
    std::uint64_t bufferId = 0;  // the driver's process-wide unique id of the allocation
  };
  std::vector<Exported> exported;
  std::uint64_t generation = 0;  // last written (even)

  // The allocation's unique id: a block freed and allocated again at the same address gets a new one.
  std::uint64_t bufferId(CUdeviceptr address) const {
    unsigned long long id = 0;
    if (getPointerAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, address) != CUDA_SUCCESS) return 0;
    return id;
  }
  // Whether the allocations exported last still are the ones they were.
  bool exportStillValid() const {
    return std::all_of(exported.begin(), exported.end(), [&](const Exported& entry) {
      return entry.bufferId != 0 && bufferId(entry.base) == entry.bufferId;
    });
  }

  // Receiver: handles opened, by handle, with the generation whose tables were last read.
  std::map<HandleBytes, void*> imports;
  std::vector<void*> importOf;  // by allocation index of importedGeneration
  std::uint64_t importedGeneration = 0;
  detail::CopyTable table;
  std::optional<Digest> tableKey;     // layout key of this receiver's tensors the table copies into
  std::uint64_t tableGeneration = 0;  // the export it copies from (0: none)
  std::uint64_t totalBytes = 0;

  // Closes what `handles` (a new export) no longer names: the sender let that memory go, and a block it allocates
  // again in the same place cannot be opened while the old mapping stands (cudaErrorAlreadyMapped).
  void closeImportsNotIn(std::span<const HandleBytes> handles) {
    const std::set<HandleBytes> named(handles.begin(), handles.end());
    for (auto entry = imports.begin(); entry != imports.end();) {
      if (named.contains(entry->first)) {
        ++entry;
      } else {
        cudaIpcCloseMemHandle(entry->second);
        entry = imports.erase(entry);
      }
    }
  }

  void closeImports() {
    for (auto& [handle, address] : imports) cudaIpcCloseMemHandle(address);
    imports.clear();
    importOf.clear();
    importedGeneration = 0;
    tableGeneration = 0;
  }

  ~State() {
    closeImports();
    if (copyBegin != nullptr) cudaEventDestroy(copyBegin);
    if (copyEnd != nullptr) cudaEventDestroy(copyEnd);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// A region round's launches (cuda_ipc_regions.cpp), on the channel's stream. A source's table: batch k checks the
// sample of its k-th receiver's segments in its buffers. A receiver's: batch 0 copies every piece from every source,
// batch 1 + k checks the sample of what landed from its k-th source.
struct CudaIpcChannel::RegionState {
  detail::CopyTable table;
  std::size_t firstCheck = 0;  // the table's first checking batch
  // What the table was described for (the plan's digest, this side's index and buffers, each source's export): a
  // round of the same layout launches it as it is, with no host work per run.
  std::optional<Digest> tableKey;
  // One per checking batch, each with its own sums and report; reset before reuse after a launch that failed.
  std::vector<detail::CopyReporter> reporters;
  std::vector<detail::CopyReport> reports;  // the last round's, by checking batch
  bool reportersClean = true;
};

}  // namespace wsync::bus::gpu
