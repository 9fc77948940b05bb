#include "round_handler.hpp"

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/text.hpp"

namespace wsync::worker_agent::detail {

namespace {

std::string hex(const bus::Digest& digest) { return bus::hex128(digest.hi, digest.lo); }

std::string text(const flatbuffers::String* string) { return string ? string->str() : std::string(); }

}  // namespace

RoundHandler::RoundHandler(bus::AgentSession& session, WorkerBindings bindings, PauseHooks hooks, WorkerFaults faults,
                           std::atomic<std::uint64_t>& appliedVersion, std::atomic<std::int32_t>& rank,
                           BindingMemory memory, int cudaDevice)
    : session_(session),
      bindings_(std::move(bindings)),
      hooks_(std::move(hooks)),
      faults_(faults),
      memory_(memory),
      appliedVersion_(appliedVersion),
      rank_(rank),
      payload_(session, cudaDevice, kTransferDeadline) {}

tl::expected<void, WorkerFailure> RoundHandler::attach() {
  rank_.store(session_.registration().rank, std::memory_order_release);
  auto view = bus::ControlBlockView::open(session_.options().bus);
  if (!view) return bus::fail(WorkerError::ControlBlock, view.error().describe());
  std::lock_guard lock(blockMutex_);
  block_.reset();
  block_.emplace(std::move(*view));
  return {};
}

std::uint64_t RoundHandler::committedVersion() const {
  std::lock_guard lock(blockMutex_);
  return block_ ? block_->committedVersion() : 0;
}

bus::PauseState RoundHandler::pauseRequested() const {
  std::lock_guard lock(blockMutex_);
  return block_ ? block_->pauseState() : bus::PauseState{};
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

void RoundHandler::resumeEngine() {
  // Whoever else holds the engine paused keeps it so: a round in progress, or an operator.
  if (inRound_ || operatorPaused_) {
    setPhase(bus::AgentPhase::Paused);
    return;
  }
  if (torn_) {
    // Resuming would generate from bytes of no committed version; the next committed round ends the wait.
    log::warn("generation stays paused: the bound buffers were overwritten by a transfer that did not commit; "
              "waiting for the next version");
    setPhase(bus::AgentPhase::Paused);
    return;
  }
  paused_ = false;
  setPhase(bus::AgentPhase::Idle);
  const std::uint64_t version = appliedVersion_.load(std::memory_order_acquire);
  log::debug("generation resumes on version {}", version);
  hooks_.resume(version);
}

void RoundHandler::pauseEngine(msg::PauseMode mode, std::uint64_t round) {
  if (paused_) return;  // already held, by a round, an operator or a torn in-place receive
  log::debug("generation pauses (mode {}, {})", msg::EnumNamePauseMode(mode),
             round == 0 ? std::string("an operator's pause") : "round " + std::to_string(round));
  hooks_.pause(mode, round);
  paused_ = true;
}

void RoundHandler::handle(const bus::Message& message) {
  switch (message.type()) {
    case msg::Body::Manifest: handleManifest(*message.as<msg::Manifest>()); return;
    case msg::Body::Pause: handlePause(*message.as<msg::Pause>()); return;
    case msg::Body::TransferPlan: handleTransferPlan(*message.as<msg::TransferPlan>()); return;
    case msg::Body::Commit: handleCommit(*message.as<msg::Commit>()); return;
    case msg::Body::Abort: handleAbort(*message.as<msg::Abort>()); return;
    case msg::Body::Resume: handleResume(*message.as<msg::Resume>()); return;
    case msg::Body::Error: {
      const auto& error = *message.as<msg::Error>();
      log::warn("the coordinator refused a request: {}: {}", msg::EnumNameErrorCode(error.code()),
                text(error.detail()));
      return;
    }
    default:
      // A newer coordinator may send more; nothing it sends is worth dying for.
      log::debug("ignoring {} from the coordinator", bus::bodyName(message.type()));
      return;
  }
}

void RoundHandler::linkLost() {
  if (inRound_) {
    log::warn("lost the coordinator during round {} (version {}): generating on version {} meanwhile{}", pausedRound_,
              pausedVersion_, appliedVersion_.load(std::memory_order_acquire),
              staged_ ? "; the staged version waits for the coordinator's word" : "");
  }
  inRound_ = false;
  // The old registration's arena mapping and communicators are of a round that is over.
  payload_.reset();
  if (paused_) resumeEngine();  // keeps it paused for an operator, or when an in-place receive tore the bindings
}

void RoundHandler::reregistered() {
  const bus::Registration& welcome = session_.registration();
  log::info("registered again (rank {}, committed version {})", welcome.rank, welcome.committedVersion);
  inRound_ = false;
  payload_.reset();
  if (auto attached = attach(); !attached) log::error("{}", attached.error().describe());
  // An operator's pause outlives coordinators and links: the Welcome says whether it still holds.
  if (welcome.operatorPaused && !operatorPaused_) {
    log::info("an operator's pause holds (mode {})", msg::EnumNamePauseMode(welcome.operatorPauseMode));
    pauseEngine(welcome.operatorPauseMode, 0);
  }
  operatorPaused_ = welcome.operatorPaused;
  // The staged version was committed if the bus's last commit is exactly it: its Commit was lost with the link.
  const bool missedCommit = staged_ && welcome.committedDigest != bus::Digest{} &&
                            staged_->round == welcome.committedRound && staged_->version == welcome.committedVersion &&
                            staged_->digest == welcome.committedDigest;
  if (missedCommit) {
    log::info("version {} of round {} was committed while the link was down: applying it", staged_->version,
              staged_->round);
    pauseEngine(pausedMode_, staged_->round);  // the copy must not race generation
    applyStaged();
  } else if (staged_) {
    log::info("dropping staged version {} of round {}: the bus committed version {}", staged_->version,
              staged_->round, welcome.committedVersion);
    staged_.reset();
  }
  if (paused_) resumeEngine();
  if (!paused_) setPhase(bus::AgentPhase::Idle);
}

void RoundHandler::checkRoundDeadline() {
  if (!inRound_ || std::chrono::steady_clock::now() < roundDeadline_) return;
  session_.restartConnection("round " + std::to_string(pausedRound_) + " (version " + std::to_string(pausedVersion_) +
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
    auto oldest = std::min_element(manifests_.begin(), manifests_.end(),
                                   [](const auto& a, const auto& b) { return a->lastUsed < b->lastUsed; });
    if (staged_ && staged_->manifest == oldest->get()) staged_.reset();
    manifests_.erase(oldest);
  }
  auto bindingMap = matchManifest(*manifest, bindings_);
  manifests_.push_back(std::make_unique<CachedManifest>(
      CachedManifest{std::move(*manifest), std::move(bindingMap), {}, ++useCounter_}));
}

void RoundHandler::sendPauseAck(std::uint64_t round, bool ok, msg::AbortReason reason, const std::string& detail) {
  builder_.reset();
  auto& fbb = builder_.fbb();
  const auto body = msg::CreatePauseAck(fbb, round, ok, appliedVersion_.load(std::memory_order_acquire), reason,
                                        detail.empty() ? 0 : fbb.CreateString(detail));
  if (auto sent = session_.send(builder_, body); !sent) log::warn("PauseAck not sent: {}", sent.error().describe());
}

void RoundHandler::sendUpdateDone(std::uint64_t round, std::uint64_t version, bool ok,
                                  const bus::TransferResult& result, msg::AbortReason reason,
                                  const std::string& detail) {
  builder_.reset();
  auto& fbb = builder_.fbb();
  const msg::Digest128 digest = bus::toMessage(result.digest);
  const auto body = msg::CreateUpdateDone(fbb, round, version, ok, result.bytes, &digest, reason,
                                          detail.empty() ? 0 : fbb.CreateString(detail));
  if (auto sent = session_.send(builder_, body); !sent) log::warn("UpdateDone not sent: {}", sent.error().describe());
}

void RoundHandler::handlePause(const msg::Pause& pause) {
  if (pause.round() == 0) {
    // An operator's pause: no manifest, no ack; the engine stays paused until the operator's resume.
    log::info("an operator paused generation (mode {})", msg::EnumNamePauseMode(pause.mode()));
    operatorPaused_ = true;
    pauseEngine(pause.mode(), 0);
    setPhase(bus::AgentPhase::Paused);
    return;
  }
  strike(bus::FaultPoint::Begin, pause.version());
  // Whatever was staged belongs to a round that ended without a Commit reaching us.
  staged_.reset();
  if (pause.manifest_digest() == nullptr) {
    ++roundsRefused_;
    sendPauseAck(pause.round(), false, msg::AbortReason::ManifestMismatch, "Pause without a manifest digest");
    return;
  }
  const bus::Digest digest = bus::fromMessage(*pause.manifest_digest());
  const CachedManifest* cached = findManifest(digest);
  if (cached == nullptr) {
    ++roundsRefused_;
    sendPauseAck(pause.round(), false, msg::AbortReason::ManifestMismatch,
                 "manifest " + hex(digest) + " was never received by this worker");
    return;
  }
  // Checked before the engine is touched: a worker that cannot take the version must not stop generating for it.
  if (!cached->bindingMap) {
    ++roundsRefused_;
    log::warn("refusing round {}: {}", pause.round(), cached->bindingMap.error().detail);
    sendPauseAck(pause.round(), false, msg::AbortReason::ManifestMismatch, cached->bindingMap.error().detail);
    return;
  }
  // A torn worker's engine is still paused from the round that tore it, an operator's from the operator's pause.
  pauseEngine(pause.mode(), pause.round());
  inRound_ = true;
  pausedRound_ = pause.round();
  pausedVersion_ = pause.version();
  pausedMode_ = pause.mode();
  roundDeadline_ = std::chrono::steady_clock::now() + session_.registration().roundBound(cached->manifest.totalBytes());
  setPhase(bus::AgentPhase::Paused);
  sendPauseAck(pause.round(), true, msg::AbortReason::None, {});
  strike(bus::FaultPoint::Pause, pause.version());
}

void RoundHandler::strike(bus::FaultPoint point, std::uint64_t version) {
  if (const auto outage = bus::reachFault(faults_.hook.get(), point, version)) session_.dropConnection(*outage);
}

tl::expected<bus::TransferResult, bus::PayloadFailure> RoundHandler::receive(const msg::TransferPlan& plan) {
  auto refuse = [](msg::AbortReason reason, std::string detail) {
    return tl::unexpected(bus::PayloadFailure{reason, bus::FailureCause::Local, std::move(detail)});
  };
  if (!paused_ || pausedRound_ != plan.round() || pausedVersion_ != plan.version()) {
    return refuse(msg::AbortReason::AgentRefused,
                  "a plan for round " + std::to_string(plan.round()) + " but the engine is not paused for it");
  }
  if (plan.manifest_digest() == nullptr) {
    return refuse(msg::AbortReason::ChannelFailure, "the plan names no manifest");
  }
  CachedManifest* cached = findManifest(bus::fromMessage(*plan.manifest_digest()));
  if (cached == nullptr || !cached->bindingMap) {
    return refuse(msg::AbortReason::ManifestMismatch, "the plan's manifest " +
                                                          hex(bus::fromMessage(*plan.manifest_digest())) +
                                                          " is not one this worker accepted");
  }
  const bus::Manifest& manifest = cached->manifest;
  const bool inPlace = memory_ == BindingMemory::Device;
  auto transfer = payload_.prepare(plan, manifest,
                                   inPlace ? bus::TensorMemory::Device : bus::TensorMemory::Host);
  if (!transfer) return tl::unexpected(transfer.error());
  if (inPlace) {
    if (cached->inPlace.size() != manifest.size()) {
      cached->inPlace.clear();
      for (const std::uint32_t binding : *cached->bindingMap) {
        cached->inPlace.push_back(bindings_.tensors()[binding].destination);
      }
    }
  } else {
    staging_.prepare(manifest);
  }

  // From here on the bound buffers of an in-place worker no longer hold its applied version.
  if (inPlace) torn_ = true;
  auto received = payload_.receive(*transfer, inPlace ? cached->inPlace : staging_.tensors(),
                                   [this, version = plan.version()](std::uint64_t bytes) {
                                     if (bytes > 0) strike(bus::FaultPoint::Transfer, version);  // after the first bucket
                                   });
  if (!received) return tl::unexpected(received.error());
  staged_ = StagedVersion{plan.round(), plan.version(), received->bytes, received->digest, cached};
  if (inPlace) {
    if (faults_.corruptReceiveAtVersion == plan.version()) {
      // The bytes are on the device: report a digest that cannot match instead of flipping one of them.
      staged_->digest.lo ^= 1;
      log::warn("test fault: reporting a wrong digest for version {}", plan.version());
      return bus::TransferResult{received->bytes, staged_->digest};
    }
    return *received;
  }

  if (faults_.corruptReceiveAtVersion == plan.version()) {
    // The corrupted digest is only meaningful if this function digests as the arena does: check on the intact bytes.
    if (detail::digestTensors(staging_.tensors()).digest != received->digest) {
      log::warn("test fault: the staging digest differs from the arena's even before corruption");
    }
    for (const auto& tensor : staging_.tensors()) {
      if (tensor.empty()) continue;
      tensor[0] ^= std::byte{0x01};
      break;
    }
    const bus::TransferResult corrupted = detail::digestTensors(staging_.tensors());
    log::warn("test fault: corrupted one staged byte of version {} (digest {} -> {})", plan.version(),
              hex(received->digest), hex(corrupted.digest));
    staged_->digest = corrupted.digest;
    return corrupted;
  }
  return *received;
}

void RoundHandler::handleTransferPlan(const msg::TransferPlan& plan) {
  staged_.reset();
  if (plan.receiver() < 0) {
    log::debug("ignoring a sender's plan for round {}: workers only receive", plan.round());
    return;
  }
  auto received = receive(plan);
  if (!received) {
    ++transfersFailed_;
    staged_.reset();
    if (paused_) setPhase(bus::AgentPhase::Paused);
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
  setPhase(bus::AgentPhase::Staged);
  sendUpdateDone(plan.round(), plan.version(), true, *received, msg::AbortReason::None, {});
  strike(bus::FaultPoint::Verify, plan.version());
}

void RoundHandler::handleCommit(const msg::Commit& commit) {
  strike(bus::FaultPoint::Commit, commit.version());
  std::string refusal;
  const bus::Digest digest = commit.digest() ? bus::fromMessage(*commit.digest()) : bus::Digest{};
  if (!staged_) {
    refusal = "nothing is staged";
  } else if (staged_->round != commit.round()) {
    refusal = "round " + std::to_string(staged_->round) + " is staged";
  } else if (commit.digest() == nullptr || staged_->digest != digest) {
    refusal = "the staged digest " + hex(staged_->digest) + " differs from the committed " + hex(digest);
  } else if (staged_->version != commit.version() || staged_->bytes != commit.bytes()) {
    refusal = "the staged version " + std::to_string(staged_->version) + " (" + std::to_string(staged_->bytes) +
              " bytes) differs from the committed one (" + std::to_string(commit.bytes()) + " bytes)";
  } else if (!paused_) {
    refusal = "the engine is not paused";  // a copy now would race generation
  }
  if (!refusal.empty()) {
    ++roundsRefused_;
    staged_.reset();
    log::warn("not applying version {} of round {}: {}; keeping version {}", commit.version(), commit.round(), refusal,
              appliedVersion_.load(std::memory_order_acquire));
    if (paused_) setPhase(bus::AgentPhase::Paused);
    return;
  }
  applyStaged();
  setPhase(bus::AgentPhase::Paused);
}

void RoundHandler::applyStaged() {
  // The engine is parked, so this copy is atomic with respect to generation: no step sees a mix of versions.
  // Device bindings received in place: the bytes are already there, and now they are a committed version.
  const StagedVersion staged = *staged_;
  if (memory_ == BindingMemory::Host) {
    const BindingMap& map = *staged.manifest->bindingMap;
    const auto tensors = staging_.tensors();
    for (std::size_t index = 0; index < map.size(); ++index) {
      const auto& destination = bindings_.tensors()[map[index]].destination;
      if (!tensors[index].empty()) std::memcpy(destination.data(), tensors[index].data(), tensors[index].size());
    }
  }
  torn_ = false;
  session_.setAppliedVersion(staged.version);
  appliedVersion_.store(staged.version, std::memory_order_release);
  log::setVersion(staged.version);
  ++roundsApplied_;
  staged_.reset();
  if (hooks_.applied) hooks_.applied(staged.version, staged.round);
}

void RoundHandler::handleAbort(const msg::Abort& abort) {
  staged_.reset();
  ++roundsAborted_;
  // The dead agent may be the trainer, whose memory a cuda_ipc receiver still maps: let go of it.
  if (abort.reason() == msg::AbortReason::AgentDied) {
    payload_.releasePeers();
  }
  log::warn("round {} (version {}) aborted: {}: {}; keeping version {}", abort.round(), abort.version(),
            msg::EnumNameAbortReason(abort.reason()), text(abort.detail()),
            appliedVersion_.load(std::memory_order_acquire));
  if (paused_) setPhase(bus::AgentPhase::Paused);
}

void RoundHandler::handleResume(const msg::Resume& resume) {
  if (resume.round() == 0) {
    log::info("an operator resumed generation");
    operatorPaused_ = false;
    if (paused_) resumeEngine();
    return;
  }
  strike(bus::FaultPoint::Resume, pausedVersion_);
  inRound_ = false;
  staged_.reset();
  // A worker that refused the Pause never paused its engine: it was generating all along.
  if (paused_) {
    resumeEngine();
  } else {
    setPhase(bus::AgentPhase::Idle);
  }
}

}  // namespace wsync::worker_agent::detail
