#include "round_handler.hpp"

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "wsync/bus/channel/region_transfer.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/wire_text.hpp"

namespace wsync::worker_agent::detail {

namespace {}  // namespace

RoundHandler::RoundHandler(bus::AgentSession& session, std::shared_ptr<const WorkerBindings> bindings, PauseHooks hooks,
                           std::shared_ptr<bus::FaultHook> faultHook, AppliedVersion& appliedVersion,
                           std::atomic<std::int32_t>& rank, BindingMemory memory, int cudaDevice)
    : session_(session),
      bindings_(std::move(bindings)),
      regionBindings_(bindings_->regionBindings()),
      hooks_(std::move(hooks)),
      faultHook_(std::move(faultHook)),
      memory_(memory),
      appliedVersion_(appliedVersion),
      rank_(rank),
      payload_(session, cudaDevice, kTransferDeadline, bus::openChannel, faultHook_.get()) {
  for (const TensorBinding& binding : bindings_->tensors()) destinations_.push_back(binding.destination);
  if (regionBindings_) payload_.declarations().addOwn(*regionBindings_);
}

std::shared_ptr<const bus::BusView> RoundHandler::busView() const {
  std::lock_guard lock(viewMutex_);
  return view_;
}

void RoundHandler::attach() {
  rank_.store(session_.registration().rank, std::memory_order_release);
  std::lock_guard lock(viewMutex_);
  view_ = session_.busView();
}

std::uint64_t RoundHandler::committedVersion() const {
  std::lock_guard lock(viewMutex_);
  return view_ ? view_->committedVersion() : 0;
}

bus::PauseState RoundHandler::pauseRequested() const {
  std::lock_guard lock(viewMutex_);
  return view_ ? view_->pauseState() : bus::PauseState{};
}

WorkerCounters RoundHandler::counters() const {
  return WorkerCounters{roundsApplied_.load(std::memory_order_relaxed), roundsAborted_.load(std::memory_order_relaxed),
                        roundsRefused_.load(std::memory_order_relaxed),
                        transfersFailed_.load(std::memory_order_relaxed)};
}

void RoundHandler::setPhase(bus::AgentPhase phase) {
  // Between a coordinator's restart and our new Welcome there is no slot to write to.
  if (session_.registered()) session_.slot().setPhase(phase);
}

RoundHandler::EngineHolds RoundHandler::holds() const {
  return EngineHolds{inRound(step_), operatorHold_.has_value(), bindingsTorn_};
}

PauseResult RoundHandler::follow(const EngineHolds& before) {
  const EngineHolds now = holds();
  PauseResult paused;
  // After a pause the bus withdrew, whatever still holds (or holds again) pauses the engine anew: the word that
  // withdrew it may already show the pause that replaced it.
  if (now.any() && !enginePaused_ && (!before.any() || (now.round && !before.round) || pauseWithdrawn_)) {
    // An operator's pause names no round; otherwise the round's pause is what stops the engine.
    const msg::PauseMode mode = now.operatorHold ? *operatorHold_ : round_.mode;
    const std::uint64_t round = now.operatorHold ? 0 : round_.round;
    const std::string why = now.operatorHold ? std::string("an operator's pause") : "round " + std::to_string(round);
    log::debug("generation pauses (mode {}, {})", msg::EnumNamePauseMode(mode), why);
    std::optional<PauseWatch> watch;
    if (hooks_.withdraw) {
      if (auto view = busView()) {
        try {
          watch.emplace(std::move(view), round, mode, [this, round] { hooks_.withdraw(round); });
        } catch (const std::system_error& error) {  // no thread to be had: the pause runs as without the hook
          log::warn("no pause watch for {} ({}): a withdrawn pause is seen only once the engine quiesced", why,
                    error.what());
        }
      }
    }
    paused = hooks_.pause(mode, round);
    pauseWithdrawn_ = watch && watch->stop();
    enginePaused_ = paused.has_value();
    if (pauseWithdrawn_) {
      log::info("the bus withdrew the pause for {} while the engine quiesced: {}", why,
                paused ? "it had quiesced, and resumes when the coordinator's word arrives"
                       : "generation goes on (" + paused.error() + ")");
    } else if (!paused) {
      log::warn("the engine's pause hook failed ({}): {}; generation goes on", why, paused.error());
    }
  } else if (!now.any() && enginePaused_) {
    const std::uint64_t version = appliedVersion_.load();
    log::debug("generation resumes on version {}", version);
    enginePaused_ = false;
    hooks_.resume(version);
  } else if (now.any() && (before.round || before.operatorHold) && !now.round && !now.operatorHold) {
    // Resuming would generate from bytes of no committed version; the next committed round ends the wait.
    log::warn(
        "generation stays paused: the bound buffers were overwritten by a transfer that did not commit; "
        "waiting for the next version");
  }
  setPhase(step_ == RoundStep::Staged ? bus::AgentPhase::Staged
           : enginePaused_            ? bus::AgentPhase::Paused
                                      : bus::AgentPhase::Idle);
  return paused;
}

PauseResult RoundHandler::enter(RoundStep step) {
  const EngineHolds before = holds();
  step_ = step;
  return follow(before);
}

bool RoundHandler::pausedFor(const msg::TransferPlan& plan) const {
  return step_ == RoundStep::Paused && round_.round == plan.round() && round_.version == plan.version();
}

void RoundHandler::handle(const bus::Message& message) {
  switch (message.type()) {
    case msg::Body::Manifest:
      handleManifest(*message.as<msg::Manifest>());
      return;
    case msg::Body::Pause:
      handlePause(*message.as<msg::Pause>());
      return;
    case msg::Body::TransferPlan:
      handleTransferPlan(*message.as<msg::TransferPlan>());
      return;
    case msg::Body::Commit:
      handleCommit(*message.as<msg::Commit>());
      return;
    case msg::Body::Abort:
      handleAbort(*message.as<msg::Abort>());
      return;
    case msg::Body::Resume:
      handleResume(*message.as<msg::Resume>());
      return;
    case msg::Body::OperatorPause:
      handleOperatorPause(*message.as<msg::OperatorPause>());
      return;
    case msg::Body::OperatorResume:
      handleOperatorResume();
      return;
    case msg::Body::Holdings:
      handleDeclaration(*message.as<msg::Holdings>());
      return;
    case msg::Body::Bindings:
      handleDeclaration(*message.as<msg::Bindings>());
      return;
    case msg::Body::Error: {
      const auto& error = *message.as<msg::Error>();
      log::warn("the coordinator refused a request: {}: {}", msg::EnumNameErrorCode(error.code()),
                bus::text(error.detail()));
      return;
    }
    default:
      // A newer coordinator may send more; nothing it sends is worth dying for.
      log::debug("ignoring {} from the coordinator", bus::bodyName(message.type()));
      return;
  }
}

void RoundHandler::linkLost() {
  if (inRound(step_)) {
    log::warn("lost the coordinator during round {} (version {}): generating on version {} meanwhile{}", round_.round,
              round_.version, appliedVersion_.load(),
              step_ == RoundStep::Staged ? "; the staged version waits for the coordinator's word" : "");
  }
  // The old registration's arena mapping and communicators are of a round that is over.
  payload_.reset();
  // The engine resumes unless an operator holds it, or an in-place receive tore the bindings.
  enter(step_ == RoundStep::Staged || step_ == RoundStep::Detached ? RoundStep::Detached : RoundStep::Idle);
}

void RoundHandler::reregistered() {
  const bus::Registration& welcome = session_.registration();
  log::info("registered again (rank {}, committed version {})", welcome.rank, welcome.committedVersion);
  payload_.reset();
  attach();
  // Without a lost link first (the coordinator restarted and no longer knew us), the round may still be Staged.
  const bool holdsStaged = step_ == RoundStep::Staged || step_ == RoundStep::Detached;
  // The staged version was committed if the bus's last commit is exactly it: its Commit was lost with the link.
  // A region round's commit: the bus committed this very round, which it does only once every pair, this worker's
  // included, agreed with what it reported. The coordinator that ran it names this worker's digest; a new one (the
  // old died after the commit) knows only the round, which is enough: round numbers are never reused on a bus.
  const bool regionCommit = staged_.regions && (welcome.committedReceiverDigest == bus::Digest{} ||
                                                welcome.committedReceiverDigest == staged_.digest);
  const bool wholeCommit =
      !staged_.regions && welcome.committedDigest != bus::Digest{} && staged_.digest == welcome.committedDigest;
  const bool missedCommit = holdsStaged && staged_.round == welcome.committedRound &&
                            staged_.version == welcome.committedVersion && (regionCommit || wholeCommit);
  // One change, so that the engine is not resumed and paused again in between: an operator's pause outlives
  // coordinators and links (the Welcome says whether it still holds), and a missed Commit is applied from Staged,
  // where the round holds the engine, so that the copy cannot race generation.
  const EngineHolds before = holds();
  if (welcome.operatorPaused && !operatorHold_) {
    log::info("an operator's pause holds (mode {})", msg::EnumNamePauseMode(welcome.operatorPauseMode));
  }
  operatorHold_ = welcome.operatorPaused ? std::optional(welcome.operatorPauseMode) : std::nullopt;
  step_ = missedCommit ? RoundStep::Staged : step_;
  const PauseResult paused = follow(before);
  if (missedCommit && !paused) {
    // Copying into the bindings of an engine that generates would mix versions under its steps.
    ++roundsRefused_;
    log::warn("not applying version {} of round {}, committed while the link was down: the engine could not pause",
              staged_.version, staged_.round);
  } else if (missedCommit) {
    log::info("version {} of round {} was committed while the link was down: applying it", staged_.version,
              staged_.round);
    applyStaged();
  } else if (holdsStaged) {
    log::info("dropping staged version {} of round {}: the bus committed version {}", staged_.version, staged_.round,
              welcome.committedVersion);
  }
  // Whatever round this worker was in is over: the new registration takes part in the next one.
  enter(RoundStep::Idle);
}

void RoundHandler::checkRoundDeadline() {
  if (!inRound(step_) || std::chrono::steady_clock::now() < round_.deadline) return;
  session_.restartConnection("round " + std::to_string(round_.round) + " (version " + std::to_string(round_.version) +
                             ") has not ended within the longest a round can last");
}

CachedManifest* RoundHandler::findManifest(const bus::Digest& digest) {
  for (auto& cached : manifests_) {
    if (cached->manifest.digest() == digest) {
      cached->lastUsed = ++useCounter_;
      return cached.get();
    }
  }
  return nullptr;
}

void RoundHandler::handleManifest(const msg::Manifest& message) {
  auto manifest = bus::Manifest::fromMessage(message);
  if (!manifest) {
    // Its Pause will then name an unknown manifest and be refused, which aborts the round with a reason.
    log::warn("rejected a manifest: {}", manifest.error().describe());
    return;
  }
  if (findManifest(manifest->digest()) != nullptr) return;
  if (manifests_.size() >= kCachedManifests) {
    // Never the staged version's: its Commit (or the next Welcome) may still come.
    const CachedManifest* staged =
        step_ == RoundStep::Staged || step_ == RoundStep::Detached ? staged_.manifest : nullptr;
    auto oldest = std::min_element(manifests_.begin(), manifests_.end(), [staged](const auto& a, const auto& b) {
      return a.get() != staged && (b.get() == staged || a->lastUsed < b->lastUsed);
    });
    manifests_.erase(oldest);
  }
  auto bindingMap = regionBindings_ ? matchRegions(*manifest) : matchManifest(*manifest, *bindings_);
  manifests_.push_back(
      std::make_unique<CachedManifest>(CachedManifest{std::move(*manifest), std::move(bindingMap), {}, ++useCounter_}));
}

tl::expected<BindingMap, WorkerFailure> RoundHandler::matchRegions(const bus::Manifest& manifest) const {
  // The coordinator checks the same before it pauses anyone; checked here too, so that a worker never pauses for a
  // manifest its slices do not fit, whatever the coordinator says.
  if (auto checked = bus::checkBindings(manifest, *regionBindings_, "this worker"); !checked) {
    return bus::fail(WorkerError::ManifestMismatch, checked.error().describe());
  }
  return BindingMap{};  // a region round places every byte by the plan, not by a map of names
}

template <typename Declaration>
void RoundHandler::handleDeclaration(const Declaration& declaration) {
  // One that does not decode is dropped: the round that needs it fails naming its digest.
  if (auto added = payload_.declarations().add(declaration); !added) {
    log::warn("refused a declaration the coordinator sent: {}", added.error().describe());
  }
}

void RoundHandler::sendPauseAck(std::uint64_t round, bool ok, msg::AbortReason reason, const std::string& detail,
                                bool manifestUnknown) {
  builder_.reset();
  auto& fbb = builder_.fbb();
  const auto body = msg::CreatePauseAck(fbb, round, ok, appliedVersion_.load(), reason,
                                        detail.empty() ? 0 : fbb.CreateString(detail), manifestUnknown);
  if (auto sent = session_.send(builder_, body); !sent) log::warn("PauseAck not sent: {}", sent.error().describe());
}

void RoundHandler::sendUpdateDone(std::uint64_t round, std::uint64_t version, bool ok,
                                  const bus::TransferResult& result, msg::AbortReason reason, const std::string& detail,
                                  const bus::RegionTransferResult* pairs) {
  builder_.reset();
  auto& fbb = builder_.fbb();
  const msg::Digest128 digest = bus::toMessage(result.digest);
  const auto entries = pairs != nullptr
                           ? bus::toMessage(fbb, *pairs)
                           : flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<msg::PairDone>>>();
  const auto body = msg::CreateUpdateDone(fbb, round, version, ok, result.bytes, &digest, reason,
                                          detail.empty() ? 0 : fbb.CreateString(detail), entries);
  if (auto sent = session_.send(builder_, body); !sent) log::warn("UpdateDone not sent: {}", sent.error().describe());
}

void RoundHandler::handlePause(const msg::Pause& pause) {
  if (pause.round() == 0) {
    // Rounds are numbered from 1. Before protocol 2 this was an operator's pause, which is OperatorPause now.
    log::warn("ignoring a Pause of round 0: no round has that number");
    return;
  }
  strike(bus::FaultPoint::Begin, pause.version());
  // A round this worker is still in ended without its Resume reaching us (the coordinator runs one round at a time
  // and sends in order): the new round replaces it, and what it staged was never committed for us.
  if (step_ != RoundStep::Idle) {
    log::warn("round {} (version {}) begins while round {} never resumed here", pause.round(), pause.version(),
              round_.round);
  }
  if (pause.manifest_digest() == nullptr) {
    refusePause(pause, msg::AbortReason::ManifestMismatch, "Pause without a manifest digest");
    return;
  }
  const bus::Digest digest = bus::fromMessage(*pause.manifest_digest());
  const CachedManifest* cached = findManifest(digest);
  if (cached == nullptr) {
    // Never received, or evicted from the cache since: the coordinator cannot know which, so it is told, and it
    // sends the manifest with a second Pause of this round.
    refusePause(pause, msg::AbortReason::ManifestMismatch,
                "manifest " + bus::hex(digest) + " is not among the " + std::to_string(manifests_.size()) +
                    " this worker holds",
                true);
    return;
  }
  // Checked before the engine is touched: a worker that cannot take the version must not stop generating for it.
  if (!cached->bindingMap) {
    log::warn("refusing round {}: {}", pause.round(), cached->bindingMap.error().detail);
    refusePause(pause, msg::AbortReason::ManifestMismatch, cached->bindingMap.error().detail);
    return;
  }
  round_ = CurrentRound{
      pause.round(), pause.version(), pause.mode(),
      std::chrono::steady_clock::now() + session_.registration().roundBound(cached->manifest.totalBytes())};
  // Pauses the engine unless it is paused already: by an operator, or by bindings a failed in-place receive tore.
  if (auto paused = enter(RoundStep::Paused); !paused) {
    if (pauseWithdrawn_) {
      // The round is over (the coordinator ignores an answer to it); should it not be, the engine is not paused.
      enter(RoundStep::Idle);
      sendPauseAck(pause.round(), false, msg::AbortReason::AgentRefused,
                   "the pause was withdrawn before the engine quiesced: " + paused.error());
      return;
    }
    refusePause(pause, msg::AbortReason::AgentRefused, "the engine's pause hook failed: " + paused.error());
    return;
  }
  sendPauseAck(pause.round(), true, msg::AbortReason::None, {});
  strike(bus::FaultPoint::Pause, pause.version());
}

void RoundHandler::refusePause(const msg::Pause& pause, msg::AbortReason reason, const std::string& detail,
                               bool manifestUnknown) {
  ++roundsRefused_;
  enter(RoundStep::Idle);
  sendPauseAck(pause.round(), false, reason, detail, manifestUnknown);
}

void RoundHandler::handleOperatorPause(const msg::OperatorPause& pause) {
  // No manifest, no ack: the engine stays paused until the operator's resume, through any rounds meanwhile.
  log::info("an operator paused generation (mode {})", msg::EnumNamePauseMode(pause.mode()));
  EngineHolds before = holds();
  // Asked again while the engine is not paused (its pause hook failed): a new request, and the engine is asked
  // again. An operator retries with a second `wsync-ctl pause`, and the coordinator, which sends the operator's
  // pause at a bounded rate, may have folded a resume and a pause in between into this one message.
  if (!enginePaused_) before.operatorHold = false;
  operatorHold_ = pause.mode();
  follow(before);
}

void RoundHandler::handleOperatorResume() {
  log::info("an operator resumed generation");
  const EngineHolds before = holds();
  operatorHold_.reset();
  follow(before);
}

void RoundHandler::strike(bus::FaultPoint point, std::uint64_t version) {
  if (const auto outage = bus::reachFault(faultHook_.get(), point, version)) session_.dropConnection(*outage);
}

tl::expected<StagedVersion, bus::PayloadFailure> RoundHandler::receive(const msg::TransferPlan& plan) {
  auto refuse = [](msg::AbortReason reason, std::string detail) {
    return tl::unexpected(bus::PayloadFailure{reason, bus::FailureCause::Local, std::move(detail)});
  };
  if (!pausedFor(plan)) {
    return refuse(msg::AbortReason::AgentRefused,
                  "a plan for round " + std::to_string(plan.round()) + " but this worker is not paused for it");
  }
  if (plan.manifest_digest() == nullptr) {
    return refuse(msg::AbortReason::ChannelFailure, "the plan names no manifest");
  }
  CachedManifest* cached = findManifest(bus::fromMessage(*plan.manifest_digest()));
  if (cached == nullptr || !cached->bindingMap) {
    return refuse(msg::AbortReason::ManifestMismatch, "the plan's manifest " +
                                                          bus::hex(bus::fromMessage(*plan.manifest_digest())) +
                                                          " is not one this worker accepted");
  }
  if (regionBindings_ && !plan.regions()) {
    return refuse(msg::AbortReason::ManifestMismatch, "this worker binds slices, and the plan is of whole tensors");
  }
  if (plan.regions()) return receiveRegions(plan, *cached);
  const bus::Manifest& manifest = cached->manifest;
  const bool inPlace = memory_ != BindingMemory::Host;
  auto transfer = payload_.prepare(
      plan, manifest, memory_ == BindingMemory::Device ? bus::TensorMemory::Device : bus::TensorMemory::Host);
  if (!transfer) return tl::unexpected(transfer.error());
  if (inPlace) {
    if (cached->inPlace.size() != manifest.size()) {
      cached->inPlace.clear();
      for (const std::uint32_t binding : *cached->bindingMap) {
        cached->inPlace.push_back(bindings_->tensors()[binding].destination);
      }
      cached->inPlaceToken = ++layoutTokens_;
    }
  } else {
    staging_.prepare(manifest);
  }

  // From here on the bound buffers of an in-place worker no longer hold its applied version.
  if (inPlace) {
    const EngineHolds before = holds();
    bindingsTorn_ = true;
    follow(before);  // the round holds the engine already: nothing changes for it
  }
  // The bound buffers never move (bindings are fixed when the worker starts), so their array keeps its token;
  // staging may be reallocated by prepare() and is named by none.
  auto received =
      payload_.receive(*transfer, inPlace ? cached->inPlace : staging_.tensors(), inPlace ? cached->inPlaceToken : 0,
                       [this, version = plan.version()](std::uint64_t bytes) {
                         if (bytes > 0) strike(bus::FaultPoint::Transfer, version);  // after the first bucket
                       });
  if (!received) return tl::unexpected(received.error());
  return StagedVersion{plan.round(), plan.version(), received->bytes, received->digest, cached, false, {}};
}

tl::expected<StagedVersion, bus::PayloadFailure> RoundHandler::receiveRegions(const msg::TransferPlan& plan,
                                                                              CachedManifest& cached) {
  // A worker that binds everything whole takes part in region rounds too (the trainer is sharded, or another worker
  // binds slices): its locals are then its bound tensors in manifest order, as wholeBindings() declares them.
  std::vector<std::span<std::byte>> wholeInPlace;
  if (!regionBindings_) {
    payload_.declarations().addOwn(bus::wholeBindings(cached.manifest));
  }
  const bool inPlace = memory_ != BindingMemory::Host;
  auto transfer = payload_.prepareRegions(
      plan, cached.manifest, memory_ == BindingMemory::Device ? bus::TensorMemory::Device : bus::TensorMemory::Host);
  if (!transfer) return tl::unexpected(transfer.error());
  std::span<const std::span<std::byte>> locals;
  if (regionBindings_) {
    if (inPlace) {
      locals = destinations_;
    } else {
      std::vector<std::uint64_t> sizes;
      for (const auto& destination : destinations_) sizes.push_back(destination.size());
      staging_.prepareLocals(sizes);
      locals = staging_.tensors();
    }
  } else if (inPlace) {
    for (const std::uint32_t binding : *cached.bindingMap)
      wholeInPlace.push_back(bindings_->tensors()[binding].destination);
    locals = wholeInPlace;
  } else {
    staging_.prepare(cached.manifest);
    locals = staging_.tensors();
  }
  if (inPlace) {
    const EngineHolds before = holds();
    bindingsTorn_ = true;
    follow(before);  // the round holds the engine already: nothing changes for it
  }
  auto received = payload_.receiveRegions(*transfer, locals, [this, version = plan.version()](std::uint64_t bytes) {
    if (bytes > 0) strike(bus::FaultPoint::Transfer, version);  // after the first bucket
  });
  if (!received) return tl::unexpected(received.error());
  StagedVersion staged{plan.round(), plan.version(), 0, bus::receiverDigestOf(*received), &cached, true, *received};
  for (const bus::PairResult& pair : *received) staged.bytes += pair.bytes;
  return staged;
}

void RoundHandler::handleTransferPlan(const msg::TransferPlan& plan) {
  if (plan.receiver() < 0) {
    log::debug("ignoring a sender's plan for round {}: workers only receive", plan.round());
    return;
  }
  const bool forThisRound = pausedFor(plan);
  auto received = receive(plan);
  if (!received) {
    ++transfersFailed_;
    if (forThisRound) enter(RoundStep::Finished);
    // A cancelled receive is the coordinator's own abort, whose message says why; anything else is news.
    if (received.error().cause == bus::FailureCause::Cancelled) {
      log::info("round {} (version {}): receive cancelled: {}", plan.round(), plan.version(), received.error().detail);
    } else {
      log::warn("round {} (version {}): receive failed: {}", plan.round(), plan.version(), received.error().detail);
    }
    sendUpdateDone(plan.round(), plan.version(), false, bus::TransferResult{}, received.error().reason,
                   received.error().detail);
    return;
  }
  staged_ = *received;
  enter(RoundStep::Staged);
  sendUpdateDone(plan.round(), plan.version(), true, bus::TransferResult{staged_.bytes, staged_.digest},
                 msg::AbortReason::None, {}, staged_.regions ? &staged_.pairs : nullptr);
  strike(bus::FaultPoint::Verify, plan.version());
}

void RoundHandler::handleCommit(const msg::Commit& commit) {
  strike(bus::FaultPoint::Commit, commit.version());
  std::string refusal;
  const bus::Digest digest = commit.digest() ? bus::fromMessage(*commit.digest()) : bus::Digest{};
  // Staged holds the engine, so a copy now cannot race generation.
  if (step_ != RoundStep::Staged) {
    refusal = "nothing is staged";
  } else if (staged_.round != commit.round()) {
    refusal = "round " + std::to_string(staged_.round) + " is staged";
  } else if (staged_.regions) {
    // A region round's Commit names this worker's own digest over what it took from every source.
    const bus::Digest own = commit.receiver_digest() ? bus::fromMessage(*commit.receiver_digest()) : bus::Digest{};
    if (commit.receiver_digest() == nullptr || staged_.digest != own) {
      refusal =
          "the staged slices' digest " + bus::hex(staged_.digest) + " differs from the committed " + bus::hex(own);
    } else if (staged_.version != commit.version()) {
      refusal = "the staged version " + std::to_string(staged_.version) + " differs from the committed one";
    }
  } else if (commit.digest() == nullptr || staged_.digest != digest) {
    refusal = "the staged digest " + bus::hex(staged_.digest) + " differs from the committed " + bus::hex(digest);
  } else if (staged_.version != commit.version() || staged_.bytes != commit.bytes()) {
    refusal = "the staged version " + std::to_string(staged_.version) + " (" + std::to_string(staged_.bytes) +
              " bytes) differs from the committed one (" + std::to_string(commit.bytes()) + " bytes)";
  }
  if (!refusal.empty()) {
    ++roundsRefused_;
    log::warn("not applying version {} of round {}: {}; keeping version {}", commit.version(), commit.round(), refusal,
              appliedVersion_.load());
    if (inRound(step_)) enter(RoundStep::Finished);  // drops what was staged
    return;
  }
  applyStaged();
  enter(RoundStep::Finished);
}

void RoundHandler::applyStaged() {
  // The round holds the engine (Staged), so this copy is atomic with respect to generation: no step sees a mix of
  // versions. Bindings received in place: the bytes are already there, and now they are a committed version.
  const StagedVersion staged = staged_;
  if (memory_ == BindingMemory::Host && staged.regions && regionBindings_) {
    const auto tensors = staging_.tensors();
    for (std::size_t index = 0; index < destinations_.size(); ++index) {
      if (!tensors[index].empty())
        std::memcpy(destinations_[index].data(), tensors[index].data(), tensors[index].size());
    }
  } else if (memory_ == BindingMemory::Host) {
    const BindingMap& map = *staged.manifest->bindingMap;
    const auto tensors = staging_.tensors();
    for (std::size_t index = 0; index < map.size(); ++index) {
      const auto& destination = bindings_->tensors()[map[index]].destination;
      if (!tensors[index].empty()) std::memcpy(destination.data(), tensors[index].data(), tensors[index].size());
    }
  }
  const EngineHolds before = holds();
  bindingsTorn_ = false;
  follow(before);  // the round still holds the engine
  session_.setAppliedVersion(staged.version);
  appliedVersion_.store(staged.version);
  log::setVersion(staged.version);
  ++roundsApplied_;
  if (hooks_.applied) hooks_.applied(staged.version, staged.round);
  appliedVersion_.wakeWaiters();  // once counted and told to the engine
}

void RoundHandler::handleAbort(const msg::Abort& abort) {
  ++roundsAborted_;
  // The dead agent may be the trainer, whose memory a cuda_ipc receiver still maps: let go of it.
  if (abort.reason() == msg::AbortReason::AgentDied) {
    payload_.releasePeers();
  }
  log::warn("round {} (version {}) aborted: {}: {}; keeping version {}", abort.round(), abort.version(),
            msg::EnumNameAbortReason(abort.reason()), bus::text(abort.detail()), appliedVersion_.load());
  if (inRound(step_)) enter(RoundStep::Finished);  // drops what was staged
}

void RoundHandler::handleResume(const msg::Resume& resume) {
  if (resume.round() == 0) {
    log::warn("ignoring a Resume of round 0: no round has that number");
    return;
  }
  strike(bus::FaultPoint::Resume, step_ != RoundStep::Idle ? round_.version : resume.version());
  // A worker that refused the Pause never paused its engine: it was generating all along. Any other resumes unless
  // an operator holds it, or an in-place receive tore its bindings.
  enter(RoundStep::Idle);
}

}  // namespace wsync::worker_agent::detail
