#pragma once
// The layout of a bus's shared-memory control block (docs/control-block.md). Plain data only: fixed capacity,
// no pointers, every field an address-free lock-free atomic, so any process can map it at any address and read
// it without a lock or a syscall. Each field has exactly one writer, named beside it. Behaviour lives in
// control_block.hpp.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace wsync::bus {

inline constexpr std::uint64_t kControlBlockMagic = 0x3142432d434e5957ULL;  // "WYNC-CB1" read little-endian
// Bumped on any change to the structs below; a block of another layout is refused, never misread.
// 2: transfer progress in agent slots; 3: no plan (PlanData, never read, removed: the TransferPlan message carries
// everything a round's agents open).
inline constexpr std::uint32_t kControlBlockLayoutVersion = 3;
inline constexpr std::size_t kMaxAgents = 256;
inline constexpr std::size_t kCacheLineBytes = 64;

// Fixed-size bytes (an agent id, a CUDA IPC handle) as atomic words: a reader racing the writer gets a torn
// value that the surrounding sequence check rejects, never undefined behaviour.
template <std::size_t Bytes>
struct AtomicBytesData {
  static_assert(Bytes % sizeof(std::uint64_t) == 0);
  std::atomic<std::uint64_t> words[Bytes / sizeof(std::uint64_t)];
};

// Written once by the creating coordinator before `magic`, which publishes the block (release store); read-only
// afterwards except the heartbeat.
struct alignas(kCacheLineBytes) ControlHeaderData {
  std::atomic<std::uint64_t> magic;  // 0 while the creator initialises
  std::uint32_t layoutVersion;
  std::uint32_t maxAgents;
  std::uint64_t segmentBytes;
  std::uint64_t epoch;              // random, new for every coordinator start
  std::uint64_t creatorStartTicks;  // creator's start time (/proc/PID/stat), so pid reuse is told apart
  std::uint32_t creatorPid;
  std::uint32_t reserved;
  std::atomic<std::uint64_t> coordinatorHeartbeatMs;  // writer: coordinator (CLOCK_MONOTONIC milliseconds)
};

// Bus-wide state. Writer: coordinator.
struct alignas(kCacheLineBytes) BusStateData {
  std::atomic<std::uint64_t> committedVersion;  // the version every worker switches to; never goes back
  std::atomic<std::uint64_t> committedRound;
  std::atomic<std::uint64_t> pauseWord;        // packed PauseState: one load gives a consistent triple
  std::atomic<std::uint64_t> roundWord;        // packed RoundState
  std::atomic<std::uint64_t> eventsPublished;  // events published so far, all topic families together
  std::atomic<std::uint32_t> activeAgents;
  // An operator's pause (wsync-ctl pause until resume): 0 none, else 1 + msg::PauseMode. Kept here, not only in the
  // coordinator's memory, so that a restarted coordinator holds it (the layout-2 word was reserved and always 0).
  std::atomic<std::uint32_t> operatorPause;
  // The committed payload's XXH3-128 digest, stored before committedVersion: a restarted coordinator tells it in
  // its Welcome, and a worker that staged exactly that version applies it although the Commit died with the old
  // coordinator. Zero: unknown (these 16 bytes were padding, always 0, in layout 2 before).
  std::atomic<std::uint64_t> committedDigestLo;
  std::atomic<std::uint64_t> committedDigestHi;
};

// One agent. The first half is written by the coordinator under `sequence` (odd while it rewrites the slot);
// the second half, on its own cache line, by the agent that holds the slot.
struct alignas(kCacheLineBytes) AgentSlotData {
  std::atomic<std::uint64_t> sequence;    // writer: coordinator
  std::atomic<std::uint64_t> generation;  // writer: coordinator; bumped whenever the slot is (re)assigned
  std::atomic<std::uint32_t> occupancy;   // writer: coordinator; SlotOccupancy
  std::atomic<std::uint32_t> role;        // writer: coordinator; msg::Role
  std::atomic<std::int32_t> rank;         // writer: coordinator
  std::atomic<std::uint32_t> pid;         // writer: coordinator
  AtomicBytesData<64> agentId;            // writer: coordinator; NUL-padded

  alignas(kCacheLineBytes) std::atomic<std::uint64_t> appliedVersion;  // writer: agent
  std::atomic<std::uint64_t> heartbeatMs;                              // writer: agent (CLOCK_MONOTONIC milliseconds)
  std::atomic<std::uint64_t> claimedGeneration;  // writer: agent; its fields are valid when this == generation
  std::atomic<std::uint32_t> phase;              // writer: agent; AgentPhase
  std::uint32_t reserved;
  // How far this agent's side of a transfer has got, for monitors and progress bars: the round, and the bytes of
  // its tensors moved so far (stored after each bucket; a reader pairing the two may see a new round with the last
  // round's count for an instant, which a progress display can afford).
  std::atomic<std::uint64_t> transferRound;  // writer: agent
  std::atomic<std::uint64_t> transferBytes;  // writer: agent
};

struct ControlBlockData {
  ControlHeaderData header;
  BusStateData bus;
  AgentSlotData agents[kMaxAgents];
};

// Shared across processes, these must be lock-free without any per-process state, and laid out identically
// by every build that agrees on kControlBlockLayoutVersion.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::int32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4);
static_assert(std::is_standard_layout_v<ControlBlockData>);
static_assert(sizeof(ControlHeaderData) == 64);
static_assert(sizeof(BusStateData) == 64);
static_assert(offsetof(BusStateData, committedDigestHi) == 56);  // the last padding of layout 2, now used
static_assert(sizeof(AgentSlotData) == 192);
static_assert(offsetof(AgentSlotData, appliedVersion) == 128);
static_assert(offsetof(AgentSlotData, transferBytes) == 168);  // still within the agent's own cache line
static_assert(offsetof(ControlBlockData, bus) == 64);
static_assert(offsetof(ControlBlockData, agents) == 128);
static_assert(sizeof(ControlBlockData) == 128 + kMaxAgents * 192);

}  // namespace wsync::bus
