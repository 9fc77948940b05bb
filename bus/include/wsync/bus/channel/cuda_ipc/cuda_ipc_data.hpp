#pragma once
// The layout of a cuda_ipc channel's segment (docs/gpu-channels.md): a header, the sender's export (its state, one
// entry per exported allocation, one per tensor), then one slot per receiver. Plain data: address-free lock-free
// atomics and offsets only. The owner (the coordinator) creates it; the sender and each receiver write only
// their own parts.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/state/control_block_data.hpp"

namespace wsync::bus::gpu {

inline constexpr std::uint64_t kIpcMagic = 0x3143504943595357ULL;  // "WSYCIPC1" read little-endian
// 2: each receiver names itself in its slot (IpcReceiverData::agentIdWords).
inline constexpr std::uint32_t kIpcLayoutVersion = 2;
inline constexpr std::uint32_t kMaxIpcReceivers = 64;
// Bytes of a cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE); checked against CUDA's where the handle is made.
inline constexpr std::size_t kIpcHandleBytes = 64;
// Words of a receiver's agent id in its slot: room for the longest (kMaxAgentIdBytes).
inline constexpr std::size_t kIpcAgentIdWords = 8;
static_assert(kMaxAgentIdBytes <= kIpcAgentIdWords * 8);

// Written once by the creator before `magic` (release), except abortedTransfer.
struct alignas(kCacheLineBytes) IpcHeaderData {
  std::atomic<std::uint64_t> magic;
  std::uint32_t layoutVersion;
  std::uint32_t maxReceivers;
  std::uint32_t maxAllocations;
  std::uint32_t maxTensors;
  std::uint64_t allocationsOffset;  // IpcAllocationData[maxAllocations], from the segment start
  std::uint64_t tensorsOffset;      // IpcTensorData[maxTensors]
  std::uint64_t segmentBytes;
  std::atomic<std::uint64_t> abortedTransfer;  // writer: the owner; everyone waiting on this transfer gives up
};

// Writer: the sender. The tables below belong to `generation`; the sender rewrites them only between transfers,
// with generation odd while it writes (a seqlock: readers check it did not move while they read).
struct alignas(kCacheLineBytes) IpcSenderData {
  std::atomic<std::uint64_t> generation;
  std::atomic<std::uint64_t> readyTransfer;  // receivers may read the tensors of this transfer now
  std::atomic<std::uint32_t> notify;         // bumped after readyTransfer changes: the receivers' futex word
  std::uint32_t allocationCount;
  std::uint32_t tensorCount;
  std::uint32_t senderPid;
  std::int32_t senderDevice;
  std::uint32_t reserved;
  std::uint64_t totalBytes;
  // A random number the sender's process drew once: a receiver that drew the same one is in that process, where
  // CUDA cannot open the handles (cuIpcOpenMemHandle: "invalid device context") and reads senderBase instead. A pid
  // alone could be another PID namespace's; 0 (a segment's zeroes, an older sender) matches no process.
  std::uint64_t processToken;
};

// Writer: receiver `index`. The digest and byte count are written before doneTransfer (release).
struct alignas(kCacheLineBytes) IpcReceiverData {
  std::atomic<std::uint64_t> doneTransfer;    // copied and digested
  std::atomic<std::uint64_t> failedTransfer;  // gave up (the sender stops waiting for it)
  std::atomic<std::uint32_t> notify;          // bumped after either changes: the sender's futex word
  std::uint32_t pid;
  std::uint64_t bytes;
  std::uint64_t digestLo;
  std::uint64_t digestHi;
  // Who holds the slot for the transfer `namedTransfer`, so that the sender's faults name it: the agent id's bytes
  // (agentIdBytes of them, zero-padded), written at the start of each receive. A seqlock: namedTransfer is 0 while
  // the words change, and the sender takes the name only when it reads the same transfer before and after them.
  std::atomic<std::uint64_t> namedTransfer;
  std::atomic<std::uint32_t> agentIdBytes;
  std::uint32_t reserved;
  std::atomic<std::uint64_t> agentIdWords[kIpcAgentIdWords];
};

// One exported allocation (the base of a cudaMalloc block), opened once per receiver and cached.
struct IpcAllocationData {
  std::uint8_t handle[kIpcHandleBytes];
  std::uint64_t bytes;
  std::uint64_t senderBase;  // its address in the sender's process: for a receiver in that process only
};

// Where tensor i's bytes are: an allocation and an offset in it.
struct IpcTensorData {
  std::uint32_t allocation;
  std::uint32_t reserved;
  std::uint64_t offset;
  std::uint64_t bytes;
};

struct IpcControlData {
  IpcHeaderData header;
  IpcSenderData sender;
  IpcReceiverData receivers[kMaxIpcReceivers];
};

static_assert(std::is_standard_layout_v<IpcControlData>);
static_assert(std::is_trivially_copyable_v<IpcAllocationData> && std::is_trivially_copyable_v<IpcTensorData>);
static_assert(sizeof(IpcHeaderData) == 64 && sizeof(IpcSenderData) == 64 && sizeof(IpcReceiverData) == 128);
static_assert(offsetof(IpcReceiverData, namedTransfer) == 48 && offsetof(IpcReceiverData, agentIdWords) == 64);
static_assert(sizeof(IpcAllocationData) == 80 && sizeof(IpcTensorData) == 24);
static_assert(sizeof(IpcControlData) == 128 + kMaxIpcReceivers * 128);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free);

}  // namespace wsync::bus::gpu
