#pragma once
// A bus's shared-memory control block (layout: control_block_data.hpp; design: docs/control-block.md).
//
//   ControlBlockView   read-only, for anyone on the host (monitors, tools)
//   AgentSlotWriter    a view plus the agent-written fields of one slot (trainer and worker agents)
//   ControlBlockOwner  creates the block and writes everything else (the coordinator; at most one per bus)
//
// Hot-path reads (committedVersion, pauseState, appliedVersion) are single atomic loads. Multi-field reads
// (agentSlot) retry a bounded number of times around the writer's sequence counter.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <wsync/schemas/control_generated.h>
#include <boost/interprocess/mapped_region.hpp>
#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/state/bus_lock.hpp"
#include "wsync/bus/state/control_block_data.hpp"
#include "wsync/bus/state/control_block_error.hpp"

namespace wsync::bus {

enum class SlotOccupancy : std::uint32_t { Free = 0, Active = 1, Dead = 2 };

// What an agent says it is doing (written by the agent itself).
enum class AgentPhase : std::uint32_t { Unknown = 0, Idle = 1, Paused = 2, Receiving = 3, Sending = 4, Staged = 5 };
// Snapshots report the phase as msg::AgentState: the same values.
static_assert(static_cast<int>(AgentPhase::Staged) == static_cast<int>(msg::AgentState::Staged) &&
              static_cast<int>(AgentPhase::Sending) == static_cast<int>(msg::AgentState::Sending) &&
              static_cast<int>(AgentPhase::Receiving) == static_cast<int>(msg::AgentState::Receiving) &&
              static_cast<int>(AgentPhase::Paused) == static_cast<int>(msg::AgentState::Paused) &&
              static_cast<int>(AgentPhase::Idle) == static_cast<int>(msg::AgentState::Idle) &&
              msg::AgentState::MAX == msg::AgentState::Staged);

struct PauseState {
  bool paused = false;
  msg::PauseMode mode = msg::PauseMode::Abort;
  std::uint64_t round = 0;  // the round that paused (48 bits are kept)

  friend bool operator==(const PauseState&, const PauseState&) = default;
};

struct RoundState {
  msg::RoundPhase phase = msg::RoundPhase::Idle;
  std::uint64_t round = 0;  // 56 bits are kept

  friend bool operator==(const RoundState&, const RoundState&) = default;
};

// One-word encodings of the two states above: one load gives a consistent state. The control block's pauseWord and
// roundWord hold them, and so does an agent's mirror of the block on another host (session/bus_mirror.hpp).
inline std::uint64_t packPause(const PauseState& state) {
  return (state.round << 16) | (std::uint64_t{static_cast<std::uint8_t>(state.mode)} << 8) |
         std::uint64_t{state.paused};
}

inline PauseState unpackPause(std::uint64_t word) {
  return PauseState{(word & 0xFFU) != 0, static_cast<msg::PauseMode>((word >> 8) & 0xFFU), word >> 16};
}

inline std::uint64_t packRound(const RoundState& state) {
  return (state.round << 8) | std::uint64_t{static_cast<std::uint8_t>(state.phase)};
}

inline RoundState unpackRound(std::uint64_t word) {
  return RoundState{static_cast<msg::RoundPhase>(word & 0xFFU), word >> 8};
}

// What the coordinator writes when it gives a slot to an agent.
struct SlotAssignment {
  std::string agentId;  // at most kMaxAgentIdBytes
  msg::Role role = msg::Role::Unknown;
  std::int32_t rank = -1;
  std::uint32_t pid = 0;
};

// The agent-written fields of a slot, for an agent that cannot map the block (it runs on another host): the
// coordinator writes them for it from what it reports (ControlBlockOwner::writeRemoteAgent).
struct RemoteAgentState {
  std::uint64_t appliedVersion = 0;
  std::uint64_t heartbeatMs = 0;  // when the coordinator last heard from it (CLOCK_MONOTONIC milliseconds)
  AgentPhase phase = AgentPhase::Idle;
  std::uint64_t transferRound = 0;
  std::uint64_t transferBytes = 0;
};

// A consistent copy of one slot. The agent-written fields are meaningful only when `agentAttached`: until the
// new holder of a reused slot has written them, they still belong to the previous one.
struct AgentSlotSnapshot {
  std::uint32_t slot = 0;
  std::uint64_t generation = 0;
  SlotOccupancy occupancy = SlotOccupancy::Free;
  msg::Role role = msg::Role::Unknown;
  std::int32_t rank = -1;
  std::uint32_t pid = 0;
  std::string agentId;
  bool agentAttached = false;
  std::uint64_t appliedVersion = 0;
  std::uint64_t heartbeatMs = 0;
  AgentPhase phase = AgentPhase::Unknown;
  std::uint64_t transferRound = 0;  // the round of the last transfer this agent took part in
  std::uint64_t transferBytes = 0;  // its bytes moved so far in that round
};

// Name of the shared-memory segment of a bus, per user: "wsync-<euid>-<bus>" (core/segment_name.hpp).
std::string controlBlockSegmentName(std::string_view busName);

class ControlBlockView {
 public:
  // Maps the block of a running coordinator read-only.
  static tl::expected<ControlBlockView, ControlBlockFailure> open(std::string_view busName);

  std::uint64_t epoch() const { return data().header.epoch; }
  std::uint32_t coordinatorPid() const { return data().header.creatorPid; }
  // Whether the coordinator that created this block still runs (its pid, told apart from a reused one by its
  // start time). A syscall or two: for agents waiting on a transfer, not for hot paths.
  bool coordinatorAlive() const;
  std::uint64_t coordinatorHeartbeatMs() const {
    return data().header.coordinatorHeartbeatMs.load(std::memory_order_acquire);
  }
  std::uint64_t committedVersion() const { return data().bus.committedVersion.load(std::memory_order_acquire); }
  std::uint64_t committedRound() const { return data().bus.committedRound.load(std::memory_order_acquire); }
  PauseState pauseState() const;
  RoundState roundState() const;
  // An operator's pause (wsync-ctl pause), which outlives rounds and coordinator restarts; nothing when none holds.
  std::optional<msg::PauseMode> operatorPause() const;
  std::uint64_t eventsPublished() const { return data().bus.eventsPublished.load(std::memory_order_acquire); }
  std::uint32_t activeAgents() const { return data().bus.activeAgents.load(std::memory_order_acquire); }

  // The hot path of output tagging: one acquire load. `slot` < kMaxAgents.
  std::uint64_t appliedVersion(std::uint32_t slot) const {
    return data().agents[slot].appliedVersion.load(std::memory_order_acquire);
  }

  // Nothing when `slot` is out of range or the coordinator kept the slot mid-rewrite too long (it died there).
  std::optional<AgentSlotSnapshot> agentSlot(std::uint32_t slot) const;

  const std::string& segmentName() const { return segmentName_; }

 protected:
  ControlBlockView(boost::interprocess::mapped_region&& region, std::string segmentName)
      : region_(std::move(region)), segmentName_(std::move(segmentName)) {}
  ControlBlockData& data() const { return *static_cast<ControlBlockData*>(region_.get_address()); }
  static tl::expected<ControlBlockView, ControlBlockFailure> map(std::string_view busName, bool writable);

 private:
  boost::interprocess::mapped_region region_;
  std::string segmentName_;
};

class AgentSlotWriter : public ControlBlockView {
 public:
  // Attaches to the slot the coordinator gave `agentId` (Welcome::slot); refuses a slot holding someone else, and a
  // block whose epoch is not `epoch` (the Welcome's) when that is given: the block must be the one of the
  // coordinator that welcomed us. Claims the slot's agent-written fields with `appliedVersion`, phase Idle and a
  // fresh heartbeat.
  static tl::expected<AgentSlotWriter, ControlBlockFailure> attach(std::string_view busName, std::uint32_t slot,
                                                                   std::string_view agentId,
                                                                   std::uint64_t appliedVersion = 0,
                                                                   std::optional<std::uint64_t> epoch = {});

  std::uint32_t slot() const { return slot_; }
  void setAppliedVersion(std::uint64_t version) { mine().appliedVersion.store(version, std::memory_order_release); }
  void setPhase(AgentPhase phase) { mine().phase.store(static_cast<std::uint32_t>(phase), std::memory_order_release); }
  void beat(std::uint64_t nowMs) { mine().heartbeatMs.store(nowMs, std::memory_order_release); }
  // Called after every bucket of a transfer: one relaxed store each, cheap enough for the data path.
  void setTransferProgress(std::uint64_t round, std::uint64_t bytes) {
    mine().transferRound.store(round, std::memory_order_relaxed);
    mine().transferBytes.store(bytes, std::memory_order_relaxed);
  }

 private:
  AgentSlotWriter(ControlBlockView&& view, std::uint32_t slot) : ControlBlockView(std::move(view)), slot_(slot) {}
  AgentSlotData& mine() const { return data().agents[slot_]; }

  std::uint32_t slot_;
};

// What a coordinator that died left in its block: the new one carries it on, so that the committed version (and
// the round numbering) never goes back across a crash, even where no agent had applied the last commit yet.
struct ReplacedBlock {
  std::uint32_t creatorPid = 0;
  std::uint64_t epoch = 0;
  std::uint64_t committedVersion = 0;
  std::uint64_t committedRound = 0;
  std::uint64_t lastRound = 0;                  // the round in progress or last finished, committed or not
  std::optional<msg::PauseMode> operatorPause;  // an operator's pause that held when it died
  Digest committedDigest{};                     // the committed payload's digest (zero: unknown)
};

class ControlBlockOwner : public ControlBlockView {
 public:
  // Takes the bus (BusLock: one owner per bus name and user on this host, whatever the runtime folder): fails with
  // BusInUse while another coordinator lives; replaces a block left by a dead one.
  static tl::expected<ControlBlockOwner, ControlBlockFailure> create(std::string_view busName);

  ControlBlockOwner(ControlBlockOwner&& other) noexcept
      : ControlBlockView(std::move(other)),
        lock_(std::move(other.lock_)),
        removeOnDestroy_(std::exchange(other.removeOnDestroy_, false)),
        replaced_(other.replaced_) {}
  ControlBlockOwner& operator=(ControlBlockOwner&&) = delete;
  ControlBlockOwner(const ControlBlockOwner&) = delete;
  ControlBlockOwner& operator=(const ControlBlockOwner&) = delete;
  // Removes the segment name (mapped processes keep their mapping) and then releases the bus.
  ~ControlBlockOwner();

  // Also dismisses contenders that asked who holds the bus (BusLock::dismissContenders): a few syscalls at most.
  void beat(std::uint64_t nowMs) {
    data().header.coordinatorHeartbeatMs.store(nowMs, std::memory_order_release);
    lock_.dismissContenders();
  }
  // `digest`: the committed payload's; stored first, so that whoever sees the version sees its digest.
  void setCommitted(std::uint64_t version, std::uint64_t round, const Digest& digest = {});
  void setPauseState(const PauseState& state);
  void setRoundState(const RoundState& state);
  void setOperatorPause(std::optional<msg::PauseMode> mode);
  void setEventsPublished(std::uint64_t count) { data().bus.eventsPublished.store(count, std::memory_order_release); }

  // The lowest free slot, if any.
  std::optional<std::uint32_t> findFreeSlot() const;
  tl::expected<void, ControlBlockFailure> assignSlot(std::uint32_t slot, const SlotAssignment& assignment);
  // The agent-written half of `slot` (assigned to an agent on another host, which cannot write it): written here
  // and claimed for the slot's current holder, so that readers treat it as they treat a local agent's. The
  // coordinator is then that half's one writer, for as long as the slot is this agent's (docs/hosts.md).
  tl::expected<void, ControlBlockFailure> writeRemoteAgent(std::uint32_t slot, const RemoteAgentState& state);
  // Marks a slot Dead (kept visible for monitors) or Free (reusable).
  tl::expected<void, ControlBlockFailure> setOccupancy(std::uint32_t slot, SlotOccupancy occupancy);

  // The block of a dead coordinator that create() found under this bus's name and replaced, if it was readable.
  const std::optional<ReplacedBlock>& replaced() const { return replaced_; }

 private:
  ControlBlockOwner(boost::interprocess::mapped_region&& region, std::string segmentName, BusLock&& lock)
      : ControlBlockView(std::move(region), std::move(segmentName)), lock_(std::move(lock)), removeOnDestroy_(true) {}

  void updateActiveAgents();

  BusLock lock_;
  bool removeOnDestroy_;
  std::optional<ReplacedBlock> replaced_;
};

}  // namespace wsync::bus
