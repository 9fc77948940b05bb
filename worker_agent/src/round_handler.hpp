#pragma once
// The worker's side of each update round, message by message (docs/update-round.md, "The worker's side of a round":
// its steps and transitions). Owned by WorkerAgent and called only on its I/O thread, except committedVersion(),
// pauseRequested() and counters(), which any thread may call.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pause_watch.hpp"
#include "staging.hpp"
#include "wsync/bus/channel/payload_endpoint.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/worker_agent/worker_agent.hpp"

namespace wsync::worker_agent::detail {

// A manifest the coordinator sent, with what this worker derived from it once.
struct CachedManifest {
  bus::Manifest manifest;
  tl::expected<BindingMap, WorkerFailure> bindingMap;  // matchManifest(manifest, bindings)
  std::vector<std::span<std::byte>> inPlace;           // Device bindings: the bound buffers in manifest order
  std::uint64_t inPlaceToken = 0;  // its name for the channels (bus::Channel::setLayoutToken): new when it is built
  std::uint64_t lastUsed = 0;
};

// What sits in staging (or, for Device bindings, in the bound buffers), waiting for its Commit.
struct StagedVersion {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  std::uint64_t bytes = 0;
  bus::Digest digest;  // a region round's: the receiver digest over `pairs` (bus::receiverDigestOf)
  const CachedManifest* manifest = nullptr;
  // A region round (docs/regions.md): what was taken from each source; staging (or the bound buffers) holds the
  // bound tensors, not the manifest's.
  bool regions = false;
  bus::RegionTransferResult pairs;
};

// Where this worker stands in an update round: one value, so that nothing can say "in a round" while something
// else says "staged for none" (docs/update-round.md, "The worker's side of a round", has the transitions).
enum class RoundStep : std::uint8_t {
  // In no round: the rounds hold nothing here. Also where a worker that refused a round's Pause stays.
  Idle,
  // Acked the round's Pause: the round holds the engine paused. Waiting for its TransferPlan.
  Paused,
  // Received the round's payload and reported it (UpdateDone ok); the round holds the engine. Waiting for its
  // Commit, which applies the staged version if it names exactly its round, version, bytes and digest.
  Staged,
  // Nothing left to do in the round but wait for its Resume, which ends the round's hold on the engine: the version
  // was applied, or the receive failed, the Commit was refused, or the round was aborted.
  Finished,
  // The link was lost (or the coordinator restarted) while Staged: the round no longer holds the engine, and the
  // staged version waits for the next Welcome, which says whether it was committed.
  Detached,
};

// Paused, Staged and Finished: the worker takes part in a round, which holds its engine paused until the Resume.
constexpr bool inRound(RoundStep step) {
  return step == RoundStep::Paused || step == RoundStep::Staged || step == RoundStep::Finished;
}

// The round this worker is in (or was Detached from).
struct CurrentRound {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  msg::PauseMode mode = msg::PauseMode::Keep;
  // By then it must have ended (Registration::roundBound), or the connection is given up.
  std::chrono::steady_clock::time_point deadline{};
};

class RoundHandler {
 public:
  RoundHandler(bus::AgentSession& session, std::shared_ptr<const WorkerBindings> bindings, PauseHooks hooks,
               std::shared_ptr<bus::FaultHook> faultHook, AppliedVersion& appliedVersion,
               std::atomic<std::int32_t>& rank, BindingMemory memory, int cudaDevice);

  // Takes the session's view of the bus for committedVersion() and pauseRequested(), and records the granted rank:
  // at start and after every re-registration (a restarted coordinator has a new block, or new beats to mirror).
  void attach();
  void handle(const bus::Message& message);
  // The connection to the coordinator was lost (or given up): the round we were in is out of our hands. The engine
  // goes on with the version it holds (unless an in-place receive tore it) instead of waiting for a coordinator that
  // may be gone or frozen; what was staged is kept until the next Welcome says whether it was committed.
  void linkLost();
  // Registered again (a restarted coordinator, a lost link): applies the staged version if the Welcome says it was
  // committed (its Commit was lost with the link), drops it otherwise, and takes over the operator's pause.
  void reregistered();
  // A round that has heard nothing from the coordinator for longer than a round can last is given up: the connection
  // is replaced and the Welcome settles what the bus decided.
  void checkRoundDeadline();

  std::uint64_t committedVersion() const;
  bus::PauseState pauseRequested() const;
  WorkerCounters counters() const;

 private:
  // What holds the engine paused: it is asked to pause while any of these does (whether it did is enginePaused_).
  struct EngineHolds {
    bool round = false;         // inRound(step_)
    bool operatorHold = false;  // operatorHold_
    bool tornBindings = false;  // bindingsTorn_
    bool any() const { return round || operatorHold || tornBindings; }
  };

  void handleManifest(const msg::Manifest& message);
  void handlePause(const msg::Pause& pause);
  void handleTransferPlan(const msg::TransferPlan& plan);
  void handleCommit(const msg::Commit& commit);
  void handleAbort(const msg::Abort& abort);
  void handleResume(const msg::Resume& resume);
  void handleOperatorPause(const msg::OperatorPause& pause);
  void handleOperatorResume();
  // Copies the staged version into the bindings (Staged: the round holds the engine) and makes it the applied one.
  void applyStaged();
  // Test faults (WorkerOptions::faultHook); a disconnect drops the session's connection for its outage.
  void strike(bus::FaultPoint point, std::uint64_t version);

  // Receives the payload into staging (or in place); returns what was received or why it failed.
  tl::expected<StagedVersion, bus::PayloadFailure> receive(const msg::TransferPlan& plan);
  // The same for a region round: this worker's slices from every source.
  tl::expected<StagedVersion, bus::PayloadFailure> receiveRegions(const msg::TransferPlan& plan,
                                                                  CachedManifest& cached);
  // A worker that binds slices: its bindings checked against `manifest` (what handleManifest keeps as bindingMap).
  tl::expected<BindingMap, WorkerFailure> matchRegions(const bus::Manifest& manifest) const;
  // Holdings and Bindings the coordinator sends before a region round's plan.
  template <typename Declaration>
  void handleDeclaration(const Declaration& declaration);

  // `manifestUnknown`: refused for a manifest this worker does not hold, which the coordinator then sends again.
  void sendPauseAck(std::uint64_t round, bool ok, msg::AbortReason reason, const std::string& detail,
                    bool manifestUnknown = false);
  void sendUpdateDone(std::uint64_t round, std::uint64_t version, bool ok, const bus::TransferResult& result,
                      msg::AbortReason reason, const std::string& detail,
                      const bus::RegionTransferResult* pairs = nullptr);
  void setPhase(bus::AgentPhase phase);
  EngineHolds holds() const;
  // Called after every change of step_, operatorHold_ or bindingsTorn_ with what held the engine before it: calls
  // the pause hook when something begins to hold an engine that is not paused (the holds go from none to some, a
  // round begins to hold it, or the last pause was withdrawn and something holds), under a PauseWatch when the hooks
  // can withdraw it, the resume hook when nothing holds a paused engine any more, and writes the agent's phase. Returns
  // the pause hook's failure when it was called and failed; pauseWithdrawn_ says whether the bus withdrew that pause
  // meanwhile.
  PauseResult follow(const EngineHolds& before);
  // Moves to `step` and follows.
  PauseResult enter(RoundStep step);
  // Answers a round's Pause with a refusal: the round aborts, and the engine was not paused for it.
  void refusePause(const msg::Pause& pause, msg::AbortReason reason, const std::string& detail,
                   bool manifestUnknown = false);
  bool pausedFor(const msg::TransferPlan& plan) const;
  std::shared_ptr<const bus::BusView> busView() const;
  CachedManifest* findManifest(const bus::Digest& digest);

  bus::AgentSession& session_;
  const std::shared_ptr<const WorkerBindings> bindings_;  // shared with the process's BindingLedger
  // What it declared in its hello when it binds slices (WorkerBindings::regionBindings); empty otherwise.
  const std::optional<bus::ReceiverBindings> regionBindings_;
  std::vector<std::span<std::byte>> destinations_;  // the bound buffers in bind order: a region round's locals
  const PauseHooks hooks_;
  const std::shared_ptr<bus::FaultHook> faultHook_;  // before payload_, which opens its channels through it
  const BindingMemory memory_;
  AppliedVersion& appliedVersion_;
  std::atomic<std::int32_t>& rank_;

  bus::MessageBuilder builder_;
  std::vector<std::unique_ptr<CachedManifest>> manifests_;  // at most kCachedManifests; pointers stay valid
  std::uint64_t useCounter_ = 0;
  std::uint64_t layoutTokens_ = 0;  // the last CachedManifest::inPlaceToken given
  bus::PayloadEndpoint payload_;
  Staging staging_;

  RoundStep step_ = RoundStep::Idle;
  CurrentRound round_;    // the round of step_; meaningless when Idle
  StagedVersion staged_;  // what step_ Staged or Detached has staged; meaningless in any other step
  // An operator's hold on generation (wsync-ctl pause until resume), in its mode: it outlasts rounds and links.
  std::optional<msg::PauseMode> operatorHold_;
  // Device bindings: an in-place receive began and no Commit completed it. The bound buffers then hold no committed
  // version, whatever step_ says, and the engine must stay paused until one lands.
  bool bindingsTorn_ = false;
  // The engine is paused: the hooks' last successful call was the pause. Not implied by the holds: a pause hook may
  // fail, and an engine whose pause failed is generating and must never be resumed.
  bool enginePaused_ = false;
  // The last pause hook follow() called was withdrawn by the bus while it ran (PauseHooks::withdraw).
  bool pauseWithdrawn_ = false;

  std::atomic<std::uint64_t> roundsApplied_{0};
  std::atomic<std::uint64_t> roundsAborted_{0};
  std::atomic<std::uint64_t> roundsRefused_{0};
  std::atomic<std::uint64_t> transfersFailed_{0};

  mutable std::mutex viewMutex_;  // guards view_, replaced on re-registration while other threads read it
  std::shared_ptr<const bus::BusView> view_;
};

}  // namespace wsync::worker_agent::detail
