#pragma once
// How a WorkerAgent is started: where its bus is, what it binds, and how it reaches the engine (PauseHooks).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/core/fault_hook.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/worker_agent/worker_bindings.hpp"

namespace wsync::worker_agent {

// How long one wait of the I/O thread for the next message lasts: stop() is noticed within it.
inline constexpr std::chrono::milliseconds kIoSlice{50};
// How long a receive may take before the worker gives up by itself. Deliberately far longer than any real
// transfer: the coordinator's transfer timeout (120 s + 1 s per GiB) aborts sooner through the arena's abort word,
// and a dead sender is found by its heartbeat; this only bounds a receive nobody will ever abort.
inline constexpr std::chrono::minutes kTransferDeadline{10};
// Manifests (with their bucket plans) kept by digest: the coordinator sends a manifest once per worker and refers
// to it by digest afterwards, and it keeps 8 itself, so a worker keeping as many never has to refuse a known one.
inline constexpr std::size_t kCachedManifests = 8;
// The registration timeout of bus::AgentSession: long enough for a coordinator that is still starting.
inline constexpr std::chrono::milliseconds kRegistrationTimeout = bus::kRegistrationTimeout;

// Where the bound buffers live, which decides the channels a worker takes and how it receives (docs/decisions.md,
// "GPU workers receive in place"):
//  - Host: the shm channel. A version is received into a host staging copy and applied on Commit, so a failed or
//    aborted round leaves the bound buffers untouched and the engine serves its last good version throughout.
//  - Device (builds with CUDA): the nccl and cuda_ipc channels, on `cudaDevice`. A version is received straight
//    into the bound buffers while the engine is paused: no second copy of the model in GPU memory. If such a
//    round then fails (a dead peer, an abort, a digest mismatch), the buffers hold bytes of no committed version,
//    so the engine stays paused until the next round commits into them: it never serves a torn model.
//  - HostInPlace: host buffers on the shm and tcp channels, received as Device bindings are: straight into the bound
//    buffers while paused, with the same rule after a failed round. For buffers the engine does not serve from
//    (its own staging, read only between versions, as the vLLM backend's): the copy a Host worker keeps for the
//    round is not needed, and neither is the copy on Commit.
enum class BindingMemory : std::uint8_t { Host, Device, HostInPlace };

struct WorkerOptions {
  std::string bus;
  std::string transport = "ipc";            // or tcp://HOST:PORT
  std::optional<bus::CurveClient> curve{};  // tcp to a coordinator that requires CURVE (bus/curve.hpp)
  std::string agentId;
  std::int32_t requestedRank = -1;  // -1: the coordinator assigns the lowest free one
  WorkerBindings bindings{};
  BindingMemory bindingMemory = BindingMemory::Host;
  int cudaDevice = 0;  // Device bindings: the CUDA device they are on
  std::chrono::milliseconds registrationTimeout = kRegistrationTimeout;
  bus::LinkHeartbeat link{};  // how soon a silent coordinator's connection counts as lost
  // Test only (tests/faults, docs/faults.md): called at each point of each round, and given every payload channel
  // the agent opens to decorate (tools/cli: wsync::cli::FaultInjector); none in production.
  std::shared_ptr<bus::FaultHook> faultHook{};
};

// What a pause hook answers: the engine is quiesced, or why it could not be (a text for the coordinator and logs).
using PauseResult = tl::expected<void, std::string>;

// How the agent reaches the engine. All but `withdraw` are called on the agent's I/O thread, one at a time.
struct PauseHooks {
  // Required. Returns once the engine is quiesced for `mode` (PauseGate::pause does exactly that): no step reads
  // the bound buffers until `resume` is called. The time it takes counts against the coordinator's pause timeout.
  // `round`: the round the engine pauses for, or 0 when an operator's pause (wsync-ctl pause) is what pauses it.
  // A failure means the engine could not pause and goes on generating: the worker refuses the round's Pause
  // (AgentRefused, "the engine's pause hook failed: ..."), so the round aborts and the engine keeps serving its
  // version; an operator's pause that fails is logged, and tried again when a round needs the engine paused.
  // `resume` is called only on an engine whose pause succeeded.
  std::function<PauseResult(msg::PauseMode mode, std::uint64_t round)> pause;
  // Required. Generation may go on; `appliedVersion` is what the bound buffers now hold.
  std::function<void(std::uint64_t appliedVersion)> resume;
  // Optional. A version was just copied into the bound buffers (the engine is still paused).
  std::function<void(std::uint64_t version, std::uint64_t round)> applied{};
  // Optional. Called on another thread while `pause` runs, at most once, when the bus no longer wants that pause:
  // the round was aborted (by the pause timeout this very drain ran past, by an operator, by another agent's
  // failure) or the operator's pause was lifted. The engine should stop quiescing and go on generating, and `pause`
  // return soon: with a failure if the engine did not quiesce (the agent then neither resumes it nor counts a
  // refusal), or success if it already had (it is resumed as usual). PauseGate::withdraw does exactly that. Without
  // it the agent reads no message of the coordinator's until `pause` returns. `round` is the pause hook's.
  std::function<void(std::uint64_t round)> withdraw{};
};

}  // namespace wsync::worker_agent
