#pragma once
// An agent's window on the state it shares with the coordinator: what it states about itself (its phase, the
// version it serves, its heartbeat, its transfer's progress) for the coordinator and monitors, and what it reads of
// the coordinator (the round's phase, whether the coordinator lives) for its cancel probes. The session opens it
// once welcomed and replaces it with every registration.
//
// On the coordinator's host it is the agent's slot in the control block (openHostSlot): plain atomic stores and
// loads, no syscall, no message. An agent on another host cannot map that block: it needs an implementation of its
// own, fed by the event stream and its heartbeats (DESIGN.md, "Hosts"), and nothing that uses this interface then
// changes. Threading: the heartbeat thread calls beat(), the agent's I/O thread everything else.
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/state/control_block.hpp"

namespace wsync::bus {

class AgentSlot {
 public:
  virtual ~AgentSlot() = default;
  virtual void setAppliedVersion(std::uint64_t version) = 0;
  virtual void setPhase(AgentPhase phase) = 0;
  virtual void beat(std::uint64_t nowMs) = 0;
  // Called after every bucket of a transfer: it must be as cheap as a store.
  virtual void setTransferProgress(std::uint64_t round, std::uint64_t bytes) = 0;
  // The round in progress and its phase, as the coordinator last published them.
  virtual RoundState roundState() const = 0;
  // Whether the coordinator that welcomed this agent still runs (CoordinatorWatch keeps the answer a while: on the
  // host this is a syscall and a /proc read).
  virtual bool coordinatorAlive() const = 0;
};

// The slot `slot` of `busName`'s control block on this host, claimed for `agentId` (AgentSlotWriter::attach: a
// slot holding someone else, or a block of another epoch than the Welcome's, is refused).
tl::expected<std::unique_ptr<AgentSlot>, ControlBlockFailure> openHostSlot(std::string_view busName,
                                                                          std::uint32_t slot,
                                                                          std::string_view agentId,
                                                                          std::uint64_t appliedVersion,
                                                                          std::uint64_t epoch);

}  // namespace wsync::bus
