#pragma once
// An agent's window on the state it shares with the coordinator: what it states about itself (its phase, the
// version it serves, its heartbeat, its transfer's progress) for the coordinator and monitors, and what it reads of
// the coordinator (the round's phase, whether the coordinator lives) for its cancel probes. The session opens it
// once welcomed and replaces it with every registration.
//
// On the coordinator's host it is the agent's slot in the control block (openHostSlot): plain atomic stores and
// loads, no syscall, no message. An agent on another host cannot map that block (openRemoteSlot): it keeps what it
// states in its own atomics and reports them at every beat, on a connection of its own, for the coordinator to
// write into the block; it reads the round and the coordinator's life from a mirror fed by the coordinator's beats
// (docs/hosts.md). Nothing that uses this interface tells the two apart.
// Threading: the heartbeat thread calls beat(), the agent's I/O thread everything else.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/registration_secret.hpp"
#include "wsync/bus/session/bus_mirror.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/socket_options.hpp"
#include "wsync/bus/transport/transport_error.hpp"

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
tl::expected<std::unique_ptr<AgentSlot>, ControlBlockFailure> openHostSlot(std::string_view busName, std::uint32_t slot,
                                                                           std::string_view agentId,
                                                                           std::uint64_t appliedVersion,
                                                                           std::uint64_t epoch);

// Where an agent on another host reports its slot, and what it reports as.
struct RemoteSlotOptions {
  std::string requestEndpoint;  // the coordinator's (a connection of the slot's own)
  std::optional<CurveClient> curve{};
  LinkHeartbeat link{};
  std::string agentId;
  std::uint32_t slot = 0;
  std::uint64_t epoch = 0;                        // the Welcome's: reports are stamped with it
  std::chrono::milliseconds heartbeatTimeout{0};  // the Welcome's: how long a silent coordinator counts as alive
  RegistrationSecret secret{};                    // the Welcome's: every report carries it
};

// The slot of an agent that cannot map the coordinator's block, reading the bus from `mirror`.
tl::expected<std::unique_ptr<AgentSlot>, TransportFailure> openRemoteSlot(zmq::context_t& context,
                                                                          RemoteSlotOptions options,
                                                                          std::uint64_t appliedVersion,
                                                                          std::shared_ptr<const BusMirror> mirror);

}  // namespace wsync::bus
