// The round state machine (docs/update-round.md): begin, pause, transfer, verify, commit, resume; abort on any
// refusal, mismatch, timeout or death.
#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>

#include "coordinator_impl.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/core/text.hpp"

namespace wsync::coordinator {

namespace {

// A client's explanation (a refusal's detail), bounded and printable before it reaches logs and every monitor.
std::string clientDetail(const flatbuffers::String* text, const char* fallback) {
  return text != nullptr ? bus::printableText(text->string_view()) : std::string(fallback);
}

std::string hex(const bus::Digest& digest) { return bus::hex128(digest.hi, digest.lo); }

double millisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

Participant* Coordinator::Impl::findParticipant(const std::string& routingId) {
  if (!round) return nullptr;
  for (auto& participant : round->participants) {
    if (participant.routingId == routingId) return &participant;
  }
  return nullptr;
}

const CachedManifest* Coordinator::Impl::cacheManifest(bus::Manifest&& manifest) {
  const bus::Digest digest = manifest.digest();
  if (auto found = manifests.find(digest); found != manifests.end()) return &found->second;
  auto plan = bus::BucketPlan::build(manifest, options.bucketBytes, options.alignment);
  if (!plan) return nullptr;
  auto gpuPlan = bus::BucketPlan::build(manifest, options.gpuBucketBytes, options.alignment);
  if (!gpuPlan) return nullptr;
  if (manifests.size() >= kMaxCachedManifests) {
    auto oldest = std::min_element(manifests.begin(), manifests.end(), [](const auto& a, const auto& b) {
      return a.second.lastUsedRound < b.second.lastUsedRound;
    });
    manifests.erase(oldest);
  }
  return &manifests
              .emplace(digest, CachedManifest{std::move(manifest), plan->bucketCount(), gpuPlan->bucketCount(),
                                              roundCounter})
              .first->second;
}

bus::ChannelOwner* Coordinator::Impl::ownerOf(msg::ChannelKind kind) const {
  for (const auto& owner : channels) {
    if (owner->kind() == kind) return owner.get();
  }
  return nullptr;
}

tl::expected<void, std::string> Coordinator::Impl::prepareChannel(ActiveRound& next, msg::ChannelKind kind,
                                                                  const AgentRecord& trainer,
                                                                  const std::vector<const AgentRecord*>& workers) {
  const std::string channelName = bus::channelName(kind);
  auto offers = [&](const AgentRecord& agent) {
    return std::find(agent.channels.begin(), agent.channels.end(), kind) != agent.channels.end();
  };
  std::vector<bus::ChannelMember> receivers;
  for (const AgentRecord* worker : workers) {
    if (!offers(*worker)) {
      std::string offered;
      for (const msg::ChannelKind other : worker->channels) {
        offered += (offered.empty() ? "" : ", ") + bus::channelName(other);
      }
      return tl::unexpected("worker '" + worker->agentId + "' cannot use channel " + channelName + " (it offers " +
                            (offered.empty() ? std::string("none") : offered) + ")");
    }
    receivers.push_back(bus::ChannelMember{worker->agentId, worker->routingId, worker->sameHost});
  }
  next.owner = ownerOf(kind);
  if (next.owner == nullptr) return tl::unexpected("channel " + channelName + " is unknown to this coordinator");
  auto grant = next.owner->prepare(bus::ChannelMember{trainer.agentId, trainer.routingId, trainer.sameHost}, receivers);
  if (!grant) return tl::unexpected(grant.error());
  next.grant = std::move(*grant);
  return {};
}

void Coordinator::Impl::strike(bus::FaultPoint point) {
  if (const auto outage = bus::reachFault(faults.get(), point, round->version)) {
    rebindRequestEndpoint(*outage, "test fault at " + std::string(bus::toString(point)));
  }
}

void Coordinator::Impl::setPhase(msg::RoundPhase phase, const std::string& detail) {
  round->phase = phase;
  block.setRoundState(bus::RoundState{phase, round->id});
  builder.reset();
  auto& fbb = builder.fbb();
  const auto body = msg::CreateRoundTransition(fbb, round->id, round->version, phase,
                                               static_cast<std::uint32_t>(round->participants.size()),
                                               fbb.CreateString(detail), round->totalBytes);
  publish(bus::topics::topicOf(bus::topics::kRound, msg::EnumNameRoundPhase(phase)), body);
}

void Coordinator::Impl::handleBegin(const std::string& source, const bus::Message& message,
                                    const msg::BeginUpdate& begin) {
  const std::uint64_t seq = message.seq();
  // A worker that died since the last liveness check (up to kLivenessCheckInterval ago) would get a Pause it can
  // never answer and fail the round: look again now, so that it is left out of the round instead (the soak
  // benchmark's restarts between rounds aborted the next round half of the time without this).
  checkLiveness();
  const AgentRecord* const trainerRecord = agents.find(source);
  if (trainerRecord == nullptr) return;  // the trainer itself is gone
  const AgentRecord& trainer = *trainerRecord;
  auto refuse = [&](msg::ErrorCode code, const std::string& detail) {
    ++stats.requestsRejected;
    replyError(source, seq, code, detail);
  };
  if (trainer.role != msg::Role::Trainer) {
    refuse(msg::ErrorCode::NotAllowed, "only a trainer can begin an update");
    return;
  }
  if (round) {
    refuse(msg::ErrorCode::RoundInProgress, "round " + std::to_string(round->id) + " (version " +
                                                std::to_string(round->version) + " from '" + round->trainerAgentId +
                                                "') is in phase " + msg::EnumNameRoundPhase(round->phase));
    return;
  }
  if (begin.version() <= committedVersion) {
    refuse(msg::ErrorCode::VersionNotIncreasing, "version " + std::to_string(begin.version()) +
                                                     " is not above the committed version " +
                                                     std::to_string(committedVersion));
    return;
  }
  if (begin.version() > bus::kMaxVersion) {
    refuse(msg::ErrorCode::InvalidField, "version " + std::to_string(begin.version()) + " is above the highest a bus "
                                         "takes, " + std::to_string(bus::kMaxVersion) + " (2^63 - 1)");
    return;
  }
  if (begin.label() != nullptr) {
    if (const std::string problem = bus::checkClientText("label", begin.label()->string_view(), bus::kMaxLabelBytes);
        !problem.empty()) {
      refuse(msg::ErrorCode::InvalidField, problem);
      return;
    }
  }
  if (begin.manifest_digest() == nullptr) {
    refuse(msg::ErrorCode::Malformed, "BeginUpdate without a manifest digest");
    return;
  }
  const bus::Digest digest = bus::fromMessage(*begin.manifest_digest());
  if (begin.manifest() != nullptr) {
    auto manifest = bus::Manifest::fromMessage(*begin.manifest());
    if (!manifest) {
      refuse(msg::ErrorCode::Malformed, "manifest: " + manifest.error().describe());
      return;
    }
    if (manifest->digest() != digest) {
      refuse(msg::ErrorCode::Malformed, "the manifest's digest " + hex(manifest->digest()) +
                                            " differs from the round's " + hex(digest));
      return;
    }
    if (cacheManifest(std::move(*manifest)) == nullptr) {
      refuse(msg::ErrorCode::Malformed, "the manifest cannot be cut into buckets");
      return;
    }
  }
  const auto cached = manifests.find(digest);
  if (cached == manifests.end()) {
    refuse(msg::ErrorCode::UnknownManifest,
           "manifest " + hex(digest) + " is unknown to this coordinator: send it with BeginUpdate");
    return;
  }
  if (begin.total_bytes() != cached->second.manifest.totalBytes()) {
    refuse(msg::ErrorCode::Malformed, "total_bytes " + std::to_string(begin.total_bytes()) + " but the manifest has " +
                                          std::to_string(cached->second.manifest.totalBytes()));
    return;
  }

  const std::vector<const AgentRecord*> workers = agents.workersByRank();

  ActiveRound next;
  if (auto prepared = prepareChannel(next, begin.channel(), trainer, workers); !prepared) {
    refuse(msg::ErrorCode::NotAllowed, prepared.error());
    return;
  }
  const bool gpuChannel = next.owner->tensorMemory() == bus::TensorMemory::Device;
  next.id = ++roundCounter;
  next.version = begin.version();
  next.label = begin.label() ? begin.label()->str() : std::string();
  next.manifestDigest = digest;
  next.totalBytes = cached->second.manifest.totalBytes();
  next.bucketBytes = gpuChannel ? options.gpuBucketBytes : options.bucketBytes;
  next.bucketCount = gpuChannel ? cached->second.gpuBucketCount : cached->second.bucketCount;
  next.mode = begin.pause_mode();
  next.trainerRoutingId = source;
  next.trainerAgentId = trainer.agentId;
  next.begun = Clock::now();
  for (const AgentRecord* worker : workers) next.participants.push_back(Participant{worker->routingId, worker->agentId, false, false, 0, bus::Digest{}});
  cached->second.lastUsedRound = next.id;
  round = std::move(next);
  setPhase(msg::RoundPhase::Begin);
  strike(bus::FaultPoint::Begin);

  // Pause: the word in shared memory first (engines polling it react without a message), then each worker.
  block.setPauseState(bus::PauseState{true, round->mode, round->id});
  setPhase(msg::RoundPhase::Pause);
  round->deadline = Clock::now() + options.pauseTimeout;
  const bus::Manifest& manifest = cached->second.manifest;
  for (const Participant& participant : round->participants) {
    AgentRecord& worker = *agents.find(participant.routingId);
    const bool known = std::find(worker.knownManifests.begin(), worker.knownManifests.end(), digest) !=
                       worker.knownManifests.end();
    if (!known) {
      // Once per worker and manifest: later rounds refer to it by digest, whatever the number of tensors.
      builder.reset();
      sendTo(worker.routingId,
             stamp(manifest.toMessage(builder.fbb())));
      worker.knownManifests.push_back(digest);
      if (worker.knownManifests.size() > kMaxCachedManifests) worker.knownManifests.erase(worker.knownManifests.begin());
    }
  }
  builder.reset();
  const msg::Digest128 wireDigest = bus::toMessage(digest);
  const auto pause = msg::CreatePause(builder.fbb(), round->id, round->version, round->mode, &wireDigest);
  const auto bytes = stamp(pause);
  for (const Participant& participant : round->participants) sendTo(participant.routingId, bytes);
  strike(bus::FaultPoint::Pause);
  if (round->participants.empty()) startTransfer();
}

void Coordinator::Impl::handlePauseAck(const AgentRecord& agent, const msg::PauseAck& ack) {
  Participant* participant = findParticipant(agent.routingId);
  if (participant == nullptr || ack.round() != round->id || round->phase != msg::RoundPhase::Pause) return;
  if (!ack.ok()) {
    const auto reason = ack.reason() == msg::AbortReason::None ? msg::AbortReason::AgentRefused : ack.reason();
    abortRound(reason, "worker '" + agent.agentId + "' refused to pause: " + clientDetail(ack.detail(), "no reason given"),
               agent.agentId);
    return;
  }
  participant->acked = true;
  if (std::all_of(round->participants.begin(), round->participants.end(),
                  [](const Participant& p) { return p.acked; })) {
    startTransfer();
  }
}

void Coordinator::Impl::startTransfer() {
  setPhase(msg::RoundPhase::Transfer);
  round->transferStarted = Clock::now();
  const std::uint64_t gib = (round->totalBytes + (std::uint64_t{1} << 30) - 1) >> 30;
  round->deadline = Clock::now() + options.transferTimeout + kTransferTimeoutPerGiB * static_cast<std::int64_t>(gib);

  const auto receivers = static_cast<std::uint32_t>(round->participants.size());
  const bus::ChannelGrant& grant = round->grant;
  auto sendPlan = [&](const std::string& peer, std::int32_t receiver) {
    builder.reset();
    auto& fbb = builder.fbb();
    const msg::Digest128 digest = bus::toMessage(round->manifestDigest);
    // Ranked channels: the trainer (the broadcast's root) is rank 0, receiver i is rank i + 1.
    const auto body = msg::CreateTransferPlan(
        fbb, round->id, round->version, round->owner->kind(), &digest, round->totalBytes, round->bucketBytes,
        round->bucketCount, options.bufferCount, options.alignment, fbb.CreateString(grant.segment),
        grant.groupId.empty() ? 0 : fbb.CreateVector(grant.groupId), grant.ranked ? receiver + 1 : -1,
        grant.ranked ? receivers + 1 : 0, receiver, receivers);
    sendTo(peer, stamp(body));
  };
  // Receivers first: they are ready to drain before the trainer has filled the first bucket.
  for (std::uint32_t index = 0; index < receivers; ++index) {
    sendPlan(round->participants[index].routingId, static_cast<std::int32_t>(index));
  }
  sendPlan(round->trainerRoutingId, -1);
  strike(bus::FaultPoint::Transfer);
}

void Coordinator::Impl::handleUpdateDone(const AgentRecord& agent, const msg::UpdateDone& done) {
  if (!round || done.round() != round->id || round->phase != msg::RoundPhase::Transfer) return;
  const bool fromTrainer = agent.routingId == round->trainerRoutingId;
  Participant* participant = fromTrainer ? nullptr : findParticipant(agent.routingId);
  if (!fromTrainer && participant == nullptr) return;
  if (!done.ok()) {
    const auto reason = done.reason() == msg::AbortReason::None ? msg::AbortReason::ChannelFailure : done.reason();
    abortRound(reason, std::string(fromTrainer ? "trainer '" : "worker '") + agent.agentId +
                           "' failed the transfer: " + clientDetail(done.detail(), "no reason given"),
               agent.agentId);
    return;
  }
  const bus::Digest digest = done.digest() ? bus::fromMessage(*done.digest()) : bus::Digest{};
  if (fromTrainer) {
    round->trainerDone = true;
    round->trainerBytes = done.bytes();
    round->trainerDigest = digest;
  } else {
    participant->done = true;
    participant->bytes = done.bytes();
    participant->digest = digest;
  }
  if (round->trainerDone && std::all_of(round->participants.begin(), round->participants.end(),
                                        [](const Participant& p) { return p.done; })) {
    verifyAndCommit();
  }
}

void Coordinator::Impl::verifyAndCommit() {
  setPhase(msg::RoundPhase::Verify);
  strike(bus::FaultPoint::Verify);
  if (round->trainerBytes != round->totalBytes) {
    abortRound(msg::AbortReason::ByteCountMismatch,
               "trainer '" + round->trainerAgentId + "' sent " + std::to_string(round->trainerBytes) +
                   " bytes, the manifest has " + std::to_string(round->totalBytes),
               round->trainerAgentId);
    return;
  }
  for (const Participant& participant : round->participants) {
    if (participant.bytes != round->trainerBytes) {
      abortRound(msg::AbortReason::ByteCountMismatch,
                 "worker '" + participant.agentId + "' received " + std::to_string(participant.bytes) +
                     " bytes, the trainer sent " + std::to_string(round->trainerBytes),
                 participant.agentId);
      return;
    }
    if (participant.digest != round->trainerDigest) {
      abortRound(msg::AbortReason::DigestMismatch,
                 "worker '" + participant.agentId + "' received bytes with digest " + hex(participant.digest) +
                     ", the trainer sent " + hex(round->trainerDigest),
                 participant.agentId);
      return;
    }
  }

  committedVersion = round->version;
  committedRound = round->id;
  committedDigest = round->trainerDigest;
  log::setVersion(committedVersion);
  committedLabel = round->label;
  block.setCommitted(round->version, round->id, round->trainerDigest);
  recordOutcome(true, msg::AbortReason::None, {});
  round->phase = msg::RoundPhase::Commit;
  block.setRoundState(bus::RoundState{msg::RoundPhase::Commit, round->id});
  // The sharpest point of all: the bus has decided (shared memory says so), nobody has been told.
  strike(bus::FaultPoint::Commit);
  auto buildCommit = [&] {
    auto& fbb = builder.fbb();
    const msg::Digest128 digest = bus::toMessage(round->trainerDigest);
    return msg::CreateCommit(fbb, round->id, round->version, fbb.CreateString(round->label), round->trainerBytes,
                             &digest);
  };
  builder.reset();
  const auto bytes = stamp(buildCommit());
  // The trainer first: on a host with fewer cores than processes, workers copying the version into their weights
  // would otherwise delay the trainer's outcome by their whole apply.
  sendTo(round->trainerRoutingId, bytes);
  for (const Participant& participant : round->participants) sendTo(participant.routingId, bytes);
  builder.reset();
  publish(std::string(bus::topics::kRound) + "commit", buildCommit());
  ++stats.roundsCommitted;
  log::info("round {} committed version {} ({} bytes to {} workers, {:.1f} ms in transfer, {:.1f} ms in all)",
            round->id, round->version, round->trainerBytes, round->participants.size(),
            millisSince(round->transferStarted), millisSince(round->begun));
  resumeWorkers(true);
}

void Coordinator::Impl::resumeWorkers(bool committed) {
  // An operator's pause outlasts the round: the workers' agents keep their engines paused through this Resume.
  block.setPauseState(operatorPause ? bus::PauseState{true, *operatorPause, 0} : bus::PauseState{false, round->mode, round->id});
  setPhase(msg::RoundPhase::Resume, committed ? "committed" : "aborted");
  strike(bus::FaultPoint::Resume);
  builder.reset();
  const auto resume = msg::CreateResume(builder.fbb(), round->id, committed ? round->version : committedVersion);
  const auto bytes = stamp(resume);
  for (const Participant& participant : round->participants) {
    if (agents.contains(participant.routingId)) sendTo(participant.routingId, bytes);
  }
  setPhase(msg::RoundPhase::Idle, committed ? "committed" : "aborted");
  round.reset();
}

void Coordinator::Impl::abortRound(msg::AbortReason reason, const std::string& detail, const std::string& agentId) {
  if (!round) return;
  // Wakes every sender and receiver of this transfer within one wait slice: nobody hangs on a dead peer (the agents'
  // cancel probes also see the round's phase in the control block change).
  round->owner->abort(round->id, round->phase >= msg::RoundPhase::Transfer);
  auto buildAbort = [&] {
    auto& fbb = builder.fbb();
    return msg::CreateAbort(fbb, round->id, round->version, reason, fbb.CreateString(detail),
                            fbb.CreateString(agentId));
  };
  builder.reset();
  const auto bytes = stamp(buildAbort());
  if (agents.contains(round->trainerRoutingId)) sendTo(round->trainerRoutingId, bytes);
  for (const Participant& participant : round->participants) {
    if (agents.contains(participant.routingId)) sendTo(participant.routingId, bytes);
  }
  builder.reset();
  publish(std::string(bus::topics::kRound) + "abort", buildAbort());
  ++stats.roundsAborted;
  recordOutcome(false, reason, detail);
  log::warn("round {} (version {}) aborted: {}: {}", round->id, round->version, msg::EnumNameAbortReason(reason),
            detail);
  if (round->phase >= msg::RoundPhase::Pause) {
    resumeWorkers(false);
  } else {
    setPhase(msg::RoundPhase::Idle, "aborted");
    round.reset();
  }
}

void Coordinator::Impl::recordOutcome(bool committed, msg::AbortReason reason, const std::string& detail) {
  history.push_back(RoundRecord{round->id, round->version, round->trainerAgentId, committed, reason, detail});
  if (history.size() > kRoundHistory) history.pop_front();
}

void Coordinator::Impl::handleTrainerAbort(const AgentRecord& agent, const msg::Abort& abort) {
  if (!round || agent.routingId != round->trainerRoutingId || abort.round() != round->id) return;
  abortRound(msg::AbortReason::Requested,
             "trainer '" + agent.agentId + "' cancelled: " + clientDetail(abort.detail(), "no reason given"),
             agent.agentId);
}

void Coordinator::Impl::agentGone(const AgentRecord& agent, const std::string& why) {
  if (!round) return;
  if (agent.routingId == round->trainerRoutingId) {
    abortRound(msg::AbortReason::AgentDied, "trainer '" + agent.agentId + "': " + why, agent.agentId);
    return;
  }
  if (findParticipant(agent.routingId) != nullptr) {
    abortRound(msg::AbortReason::AgentDied, "worker '" + agent.agentId + "': " + why, agent.agentId);
  }
}

void Coordinator::Impl::checkRoundDeadline() {
  if (!round || Clock::now() < round->deadline) return;
  std::string missing;
  auto add = [&](const std::string& name) { missing += (missing.empty() ? "" : ", ") + name; };
  for (const Participant& participant : round->participants) {
    if ((round->phase == msg::RoundPhase::Pause && !participant.acked) ||
        (round->phase == msg::RoundPhase::Transfer && !participant.done)) {
      add("'" + participant.agentId + "'");
    }
  }
  if (round->phase == msg::RoundPhase::Transfer && !round->trainerDone) add("trainer '" + round->trainerAgentId + "'");
  abortRound(msg::AbortReason::Timeout,
             std::string("phase ") + msg::EnumNameRoundPhase(round->phase) + " ran past its timeout; waiting for " +
                 (missing.empty() ? std::string("nobody") : missing),
             {});
}

}  // namespace wsync::coordinator
