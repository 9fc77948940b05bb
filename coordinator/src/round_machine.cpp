// The round state machine (docs/update-round.md): begin, pause, transfer, verify, commit, resume; abort on any
// refusal, mismatch, timeout or death.
#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>

#include "round_machine.hpp"
#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/host_identity.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/topics.hpp"

namespace wsync::coordinator {

namespace {

// A client's explanation (a refusal's detail), bounded and printable before it reaches logs and every monitor.
std::string clientDetail(const flatbuffers::String* text, const char* fallback) {
  return text != nullptr ? bus::printableText(text->string_view()) : std::string(fallback);
}

double millisBetween(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

}  // namespace

Participant* RoundMachine::findParticipant(const std::string& routingId) {
  if (!round_) return nullptr;
  for (auto& participant : round_->participants) {
    if (participant.routingId == routingId) return &participant;
  }
  return nullptr;
}

RoundSource* RoundMachine::findSource(const std::string& routingId) {
  if (!round_) return nullptr;
  for (auto& source : round_->sources) {
    if (!source.routingId.empty() && source.routingId == routingId) return &source;
  }
  return nullptr;
}

const RoundSource& RoundMachine::firstSource() const {
  const auto first = std::find_if(round_->sources.begin(), round_->sources.end(),
                                  [](const RoundSource& source) { return !source.routingId.empty(); });
  return first != round_->sources.end() ? *first : round_->sources.front();
}

std::string RoundMachine::sourceName(std::size_t source) const {
  const std::string& agentId = round_->sources[source].agentId;
  if (round_->sources.size() == 1) return "trainer '" + agentId + "'";
  return "trainer rank " + std::to_string(source) + " ('" + agentId + "')";
}

RoundMachine::CachedManifest* RoundMachine::cacheManifest(bus::Manifest&& manifest) {
  const bus::Digest digest = manifest.digest();
  if (auto found = manifests_.find(digest); found != manifests_.end()) return &found->second;
  auto plan = bus::BucketPlan::build(manifest, parts_.options.bucketBytes, parts_.options.alignment);
  if (!plan) return nullptr;
  auto gpuPlan = bus::BucketPlan::build(manifest, parts_.options.gpuBucketBytes, parts_.options.alignment);
  if (!gpuPlan) return nullptr;
  if (manifests_.size() >= kMaxCachedManifests) {
    auto oldest = std::min_element(manifests_.begin(), manifests_.end(), [](const auto& a, const auto& b) {
      return a.second.lastUsedRound < b.second.lastUsedRound;
    });
    manifests_.erase(oldest);
  }
  return &manifests_
              .emplace(digest,
                       CachedManifest{std::move(manifest), plan->bucketCount(), gpuPlan->bucketCount(), roundCounter_})
              .first->second;
}

RoundMachine::RoundMachine(RoundMachineParts parts, std::vector<std::unique_ptr<bus::ChannelOwner>> channels)
    : parts_(std::move(parts)), channels_(std::move(channels)) {}

void RoundMachine::carryOver(const CommittedVersion& committed, std::uint64_t lastRound) {
  committed_ = committed;
  roundCounter_ = std::max(committed.round, lastRound);
  log::setVersion(committed_.version);
}

bus::ChannelOwner* RoundMachine::ownerOf(msg::ChannelKind kind) {
  for (const auto& owner : channels_) {
    if (owner->kind() == kind) return owner.get();
  }
  return nullptr;
}

const bus::ChannelOwner* RoundMachine::ownerOf(msg::ChannelKind kind) const {
  return const_cast<RoundMachine*>(this)->ownerOf(kind);
}

tl::expected<void, std::string> RoundMachine::prepareChannel(ActiveRound& next, msg::ChannelKind kind,
                                                             std::span<const AgentRecord* const> senders,
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
    receivers.push_back(channelMember(*worker));
  }
  next.owner = ownerOf(kind);
  if (next.owner == nullptr) return tl::unexpected("channel " + channelName + " is unknown to this coordinator");
  std::vector<bus::ChannelMember> members;
  for (const AgentRecord* sender : senders) members.push_back(channelMember(*sender));
  if (!next.owner->crossesHosts()) {
    std::string elsewhere;
    auto note = [&](const char* role, const bus::ChannelMember& member) {
      if (member.sameHost) return;
      elsewhere +=
          std::string(elsewhere.empty() ? "" : ", ") + role + " '" + member.agentId + "' on host '" + member.host + "'";
    };
    for (const bus::ChannelMember& sender : members) note("trainer", sender);
    for (const bus::ChannelMember& receiver : receivers) note("worker", receiver);
    if (!elsewhere.empty()) {
      return tl::unexpected("channel " + channelName + " needs every agent on the coordinator's host ('" +
                            bus::thisHost().name + "', sharing its /dev/shm), and " + elsewhere +
                            (elsewhere.find(", ") == std::string::npos ? " is" : " are") +
                            " on another: choose a channel that crosses hosts");
    }
  }
  // A region round asks for its sources' resources even when it has one: its agents move regions, not buckets.
  auto grant =
      next.regions ? next.owner->prepareSources(members, receivers) : next.owner->prepare(members.front(), receivers);
  if (!grant) return tl::unexpected(grant.error());
  next.grant = std::move(*grant);
  return {};
}

void RoundMachine::strike(bus::FaultPoint point) {
  if (const auto outage = bus::reachFault(parts_.faults.get(), point, round_->version)) {
    parts_.cutRequestEndpoint(*outage, "test fault at " + std::string(bus::toString(point)));
  }
}

void RoundMachine::setPhase(msg::RoundPhase phase, const std::string& detail) {
  round_->phase = phase;
  parts_.block.setRoundState(bus::RoundState{phase, round_->id});
  auto& fbb = parts_.outbox.start();
  const auto body = msg::CreateRoundTransition(fbb, round_->id, round_->version, phase,
                                               static_cast<std::uint32_t>(round_->participants.size()),
                                               fbb.CreateString(detail), round_->totalBytes);
  parts_.outbox.publish(bus::topics::topicOf(bus::topics::kRound, msg::EnumNameRoundPhase(phase)), body);
}

tl::expected<RoundMachine::CachedManifest*, Refusal> RoundMachine::checkBegin(const msg::BeginUpdate& begin) {
  auto refusal = [](msg::ErrorCode code, std::string detail) {
    return tl::unexpected(Refusal{code, std::move(detail)});
  };
  if (begin.version() <= committed_.version) {
    return refusal(msg::ErrorCode::VersionNotIncreasing, "version " + std::to_string(begin.version()) +
                                                             " is not above the committed version " +
                                                             std::to_string(committed_.version));
  }
  if (begin.version() > bus::kMaxVersion) {
    return refusal(msg::ErrorCode::InvalidField, "version " + std::to_string(begin.version()) +
                                                     " is above the highest a bus takes, " +
                                                     std::to_string(bus::kMaxVersion) + " (2^63 - 1)");
  }
  if (begin.label() != nullptr) {
    if (std::string problem = bus::checkClientText("label", begin.label()->string_view(), bus::kMaxLabelBytes);
        !problem.empty()) {
      return refusal(msg::ErrorCode::InvalidField, std::move(problem));
    }
  }
  if (begin.manifest_digest() == nullptr)
    return refusal(msg::ErrorCode::Malformed, "BeginUpdate without a manifest digest");
  const bus::Digest digest = bus::fromMessage(*begin.manifest_digest());
  if (begin.manifest() != nullptr) {
    auto manifest = bus::Manifest::fromMessage(*begin.manifest());
    if (!manifest) return refusal(msg::ErrorCode::Malformed, "manifest: " + manifest.error().describe());
    if (manifest->digest() != digest) {
      return refusal(msg::ErrorCode::Malformed, "the manifest's digest " + bus::hex(manifest->digest()) +
                                                    " differs from the round's " + bus::hex(digest));
    }
    if (cacheManifest(std::move(*manifest)) == nullptr) {
      return refusal(msg::ErrorCode::Malformed, "the manifest cannot be cut into buckets");
    }
  }
  const auto cached = manifests_.find(digest);
  if (cached == manifests_.end()) {
    return refusal(msg::ErrorCode::UnknownManifest,
                   "manifest " + bus::hex(digest) + " is unknown to this coordinator: send it with BeginUpdate");
  }
  if (begin.total_bytes() != cached->second.manifest.totalBytes()) {
    return refusal(msg::ErrorCode::Malformed, "total_bytes " + std::to_string(begin.total_bytes()) +
                                                  " but the manifest has " +
                                                  std::to_string(cached->second.manifest.totalBytes()));
  }
  return &cached->second;
}

void RoundMachine::refuse(const AgentRecord& agent, std::uint64_t seq, const Refusal& refusal) {
  ++parts_.stats.requestsRejected;
  parts_.outbox.refuse(agent.routingId, seq, refusal.code, refusal.detail, committed_.version);
}

void RoundMachine::begin(const AgentRecord& trainer, std::uint64_t seq, const msg::BeginUpdate& begin) {
  if (trainer.role != msg::Role::Trainer) {
    refuse(trainer, seq, Refusal{msg::ErrorCode::NotAllowed, "only a trainer can begin an update"});
    return;
  }
  if (round_) {
    // The other ranks of a sharded trainer join the round their first rank began; a trainer of one source waits its
    // turn like any other.
    if (round_->regions && round_->phase == msg::RoundPhase::Begin && begin.source_count() > 1 &&
        findSource(trainer.routingId) == nullptr) {
      joinRegions(trainer, seq, begin);
      return;
    }
    refuse(trainer, seq,
           Refusal{msg::ErrorCode::RoundInProgress,
                   "round " + std::to_string(round_->id) + " (version " + std::to_string(round_->version) + " from '" +
                       firstSource().agentId + "') is in phase " + msg::EnumNameRoundPhase(round_->phase)});
    return;
  }
  auto cached = checkBegin(begin);
  if (!cached) {
    refuse(trainer, seq, cached.error());
    return;
  }
  if (isRegionBegin(begin)) {
    beginRegions(trainer, seq, begin, **cached);
    return;
  }

  const std::vector<const AgentRecord*> workers = parts_.agents.workersByRank();
  ActiveRound next;
  const AgentRecord* const senders[] = {&trainer};
  if (auto prepared = prepareChannel(next, begin.channel(), senders, workers); !prepared) {
    refuse(trainer, seq, Refusal{msg::ErrorCode::NotAllowed, prepared.error()});
    return;
  }
  const bool gpuChannel = next.owner->tensorMemory() == bus::TensorMemory::Device;
  next.id = ++roundCounter_;
  next.version = begin.version();
  next.label = begin.label() ? begin.label()->str() : std::string();
  next.manifestDigest = (*cached)->manifest.digest();
  next.totalBytes = (*cached)->manifest.totalBytes();
  next.bucketBytes = gpuChannel ? parts_.options.gpuBucketBytes : parts_.options.bucketBytes;
  next.bucketCount = gpuChannel ? (*cached)->gpuBucketCount : (*cached)->bucketCount;
  next.mode = begin.pause_mode();
  next.channel = begin.channel();
  next.sources.push_back(sourceOf(trainer));
  next.begun = parts_.now();
  for (const AgentRecord* worker : workers) next.participants.push_back(participantOf(*worker));
  (*cached)->lastUsedRound = next.id;
  round_ = std::move(next);
  setPhase(msg::RoundPhase::Begin);
  strike(bus::FaultPoint::Begin);
  pauseWorkers((*cached)->manifest);
}

void RoundMachine::pauseWorkers(const bus::Manifest& manifest) {
  // Pause: the word in shared memory first (engines polling it react without a message), then each worker.
  parts_.pause.roundPaused(round_->id, round_->mode);
  setPhase(msg::RoundPhase::Pause);
  round_->deadline = parts_.now() + parts_.options.pauseTimeout;
  for (const Participant& participant : round_->participants) {
    sendManifestIfNew(*parts_.agents.find(participant.routingId), manifest);
  }
  const msg::Digest128 wireDigest = bus::toMessage(manifest.digest());
  const auto pause = msg::CreatePause(parts_.outbox.start(), round_->id, round_->version, round_->mode, &wireDigest);
  const auto bytes = parts_.outbox.stamp(pause);
  for (const Participant& participant : round_->participants) parts_.outbox.send(participant.routingId, bytes);
  strike(bus::FaultPoint::Pause);
  if (round_->participants.empty()) startTransfer();
}

void RoundMachine::sendManifestIfNew(AgentRecord& worker, const bus::Manifest& manifest) {
  auto& known = worker.knownManifests;
  if (std::find(known.begin(), known.end(), manifest.digest()) != known.end()) return;
  // Once per worker and manifest: later rounds refer to it by digest, whatever the number of tensors. This list is a
  // guess at the worker's cache, never trusted: a worker that lacks the manifest says so and is sent it again.
  parts_.outbox.send(worker.routingId, manifest.toMessage(parts_.outbox.start()));
  known.push_back(manifest.digest());
  if (known.size() > kMaxCachedManifests) known.erase(known.begin());
}

bool RoundMachine::resendManifest(Participant& participant, AgentRecord& worker) {
  if (participant.manifestResent) return false;
  const auto cached = manifests_.find(round_->manifestDigest);
  if (cached == manifests_.end()) return false;  // kept while its round runs: cannot happen
  participant.manifestResent = true;
  auto& known = worker.knownManifests;
  known.erase(std::remove(known.begin(), known.end(), round_->manifestDigest), known.end());
  sendManifestIfNew(worker, cached->second.manifest);
  const msg::Digest128 digest = bus::toMessage(round_->manifestDigest);
  parts_.outbox.send(worker.routingId, parts_.outbox.stamp(msg::CreatePause(parts_.outbox.start(), round_->id,
                                                                            round_->version, round_->mode, &digest)));
  log::info("round {}: worker '{}' lacked manifest {}: sent it again", round_->id, worker.agentId,
            bus::hex(round_->manifestDigest));
  return true;
}

void RoundMachine::pauseAck(const AgentRecord& agent, const msg::PauseAck& ack) {
  Participant* participant = findParticipant(agent.routingId);
  if (participant == nullptr || ack.round() != round_->id || round_->phase != msg::RoundPhase::Pause) return;
  if (!ack.ok() && ack.manifest_unknown() && !participant->acked &&
      resendManifest(*participant, *parts_.agents.find(agent.routingId))) {
    return;
  }
  if (!ack.ok()) {
    const auto reason = ack.reason() == msg::AbortReason::None ? msg::AbortReason::AgentRefused : ack.reason();
    abortRound(reason,
               "worker '" + agent.agentId + "' refused to pause: " + clientDetail(ack.detail(), "no reason given"),
               agent.agentId);
    return;
  }
  participant->acked = true;
  if (std::all_of(round_->participants.begin(), round_->participants.end(),
                  [](const Participant& p) { return p.acked; })) {
    startTransfer();
  }
}

void RoundMachine::startTransfer() {
  setPhase(msg::RoundPhase::Transfer);
  round_->transferStarted = parts_.now();
  const std::uint64_t gib = (round_->totalBytes + (std::uint64_t{1} << 30) - 1) >> 30;
  round_->deadline =
      parts_.now() + parts_.options.transferTimeout + kTransferTimeoutPerGiB * static_cast<std::int64_t>(gib);
  if (round_->regions) {
    sendDeclarations();
    sendRegionPlans();
  } else {
    sendPlans();
  }
  strike(bus::FaultPoint::Transfer);
}

void RoundMachine::sendPlans() {
  const auto receivers = static_cast<std::uint32_t>(round_->participants.size());
  const bus::ChannelGrant& grant = round_->grant;
  auto sendPlan = [&](const std::string& peer, std::int32_t receiver) {
    auto& fbb = parts_.outbox.start();
    const msg::Digest128 digest = bus::toMessage(round_->manifestDigest);
    // Ranked channels: the trainer (the broadcast's root) is rank 0, receiver i is rank i + 1.
    const auto body = msg::CreateTransferPlan(
        fbb, round_->id, round_->version, round_->owner->kind(), &digest, round_->totalBytes, round_->bucketBytes,
        round_->bucketCount, parts_.options.bufferCount, parts_.options.alignment, fbb.CreateString(grant.segment),
        grant.groupId.empty() ? 0 : fbb.CreateVector(grant.groupId), grant.ranked ? receiver + 1 : -1,
        grant.ranked ? receivers + 1 : 0, receiver, receivers,
        grant.senderContact.empty() ? 0 : fbb.CreateString(grant.senderContact));
    parts_.outbox.send(peer, parts_.outbox.stamp(body));
  };
  // Receivers first: they are ready to drain before the trainer has filled the first bucket.
  for (std::uint32_t index = 0; index < receivers; ++index) {
    sendPlan(round_->participants[index].routingId, static_cast<std::int32_t>(index));
  }
  sendPlan(round_->sources.front().routingId, -1);
}

void RoundMachine::updateDone(const AgentRecord& agent, const msg::UpdateDone& done) {
  if (!round_ || done.round() != round_->id || round_->phase != msg::RoundPhase::Transfer) return;
  RoundSource* source = findSource(agent.routingId);
  Participant* participant = source != nullptr ? nullptr : findParticipant(agent.routingId);
  if (source == nullptr && participant == nullptr) return;
  if (!done.ok()) {
    if (round_->regions) forgetDeclarations(agent.routingId);
    const auto reason = done.reason() == msg::AbortReason::None ? msg::AbortReason::ChannelFailure : done.reason();
    const std::string who = source != nullptr ? sourceName(static_cast<std::size_t>(source - round_->sources.data()))
                                              : "worker '" + agent.agentId + "'";
    abortRound(reason, who + " failed the transfer: " + clientDetail(done.detail(), "no reason given"), agent.agentId);
    return;
  }
  if (round_->regions) {
    regionDone(agent, done);
    return;
  }
  const bus::Digest digest = done.digest() ? bus::fromMessage(*done.digest()) : bus::Digest{};
  if (source != nullptr) {
    source->done = true;
    source->bytes = done.bytes();
    source->digest = digest;
  } else {
    participant->done = true;
    participant->bytes = done.bytes();
    participant->digest = digest;
  }
  if (round_->sources.front().done && std::all_of(round_->participants.begin(), round_->participants.end(),
                                                  [](const Participant& p) { return p.done; })) {
    verifyAndCommit();
  }
}

void RoundMachine::verifyAndCommit() {
  setPhase(msg::RoundPhase::Verify);
  strike(bus::FaultPoint::Verify);
  const RoundSource& trainer = round_->sources.front();
  if (trainer.bytes != round_->totalBytes) {
    abortRound(msg::AbortReason::ByteCountMismatch,
               sourceName(0) + " sent " + std::to_string(trainer.bytes) + " bytes, the manifest has " +
                   std::to_string(round_->totalBytes),
               trainer.agentId);
    return;
  }
  for (const Participant& participant : round_->participants) {
    if (participant.bytes != trainer.bytes) {
      abortRound(msg::AbortReason::ByteCountMismatch,
                 "worker '" + participant.agentId + "' received " + std::to_string(participant.bytes) +
                     " bytes, the trainer sent " + std::to_string(trainer.bytes),
                 participant.agentId);
      return;
    }
    if (participant.digest != trainer.digest) {
      abortRound(msg::AbortReason::DigestMismatch,
                 "worker '" + participant.agentId + "' received bytes with digest " + bus::hex(participant.digest) +
                     ", the trainer sent " + bus::hex(trainer.digest),
                 participant.agentId);
      return;
    }
  }
  round_->versionDigest = trainer.digest;
  announceCommit();
}

void RoundMachine::announceCommit() {
  std::map<std::string, bus::Digest, std::less<>> receiverDigests;
  if (round_->regions) {
    for (const Participant& participant : round_->participants) {
      receiverDigests.emplace(participant.agentId, participant.receiverDigest);
    }
  }
  committed_ =
      CommittedVersion{round_->version, round_->id, round_->versionDigest, round_->label, std::move(receiverDigests)};
  log::setVersion(committed_.version);
  parts_.block.setCommitted(round_->version, round_->id, round_->versionDigest);
  recordOutcome(true, msg::AbortReason::None, {});
  round_->phase = msg::RoundPhase::Commit;
  parts_.block.setRoundState(bus::RoundState{msg::RoundPhase::Commit, round_->id});
  // The sharpest point of all: the bus has decided (shared memory says so), nobody has been told.
  strike(bus::FaultPoint::Commit);
  // A worker of a region round is told its own digest: it applies only bytes that are what it took (docs/regions.md).
  auto buildCommit = [&](const bus::Digest& receiverDigest) {
    auto& fbb = parts_.outbox.start();
    const msg::Digest128 digest = bus::toMessage(round_->versionDigest);
    const msg::Digest128 receiver = bus::toMessage(receiverDigest);
    return msg::CreateCommit(fbb, round_->id, round_->version, fbb.CreateString(round_->label), round_->totalBytes,
                             &digest, round_->regions ? &receiver : nullptr);
  };
  const auto bytes = parts_.outbox.stamp(buildCommit(bus::Digest{}));
  // The trainer first: on a host with fewer cores than processes, workers copying the version into their weights
  // would otherwise delay the trainer's outcome by their whole apply.
  for (const RoundSource& source : round_->sources) parts_.outbox.send(source.routingId, bytes);
  for (const Participant& participant : round_->participants) {
    if (round_->regions) {
      parts_.outbox.send(participant.routingId, parts_.outbox.stamp(buildCommit(participant.receiverDigest)));
    } else {
      parts_.outbox.send(participant.routingId, bytes);
    }
  }
  parts_.outbox.publish(std::string(bus::topics::kRound) + "commit", buildCommit(bus::Digest{}));
  ++parts_.stats.roundsCommitted;
  log::info(
      "round {} committed version {} ({} bytes from {} source{} to {} workers, {:.1f} ms in transfer, {:.1f} ms "
      "in all)",
      round_->id, round_->version, round_->totalBytes, round_->sources.size(), round_->sources.size() == 1 ? "" : "s",
      round_->participants.size(), millisBetween(round_->transferStarted, parts_.now()),
      millisBetween(round_->begun, parts_.now()));
  resumeWorkers(true);
}

void RoundMachine::resumeWorkers(bool committed) {
  // An operator's pause outlasts the round: the workers' agents keep their engines paused through this Resume.
  parts_.pause.roundEnded();
  setPhase(msg::RoundPhase::Resume, committed ? "committed" : "aborted");
  strike(bus::FaultPoint::Resume);
  const auto resume =
      msg::CreateResume(parts_.outbox.start(), round_->id, committed ? round_->version : committed_.version);
  const auto bytes = parts_.outbox.stamp(resume);
  for (const Participant& participant : round_->participants) {
    if (parts_.agents.contains(participant.routingId)) parts_.outbox.send(participant.routingId, bytes);
  }
  setPhase(msg::RoundPhase::Idle, committed ? "committed" : "aborted");
  round_.reset();
}

void RoundMachine::abortRound(msg::AbortReason reason, const std::string& detail, const std::string& agentId) {
  if (!round_) return;
  // Wakes every sender and receiver of this transfer within one wait slice: nobody hangs on a dead peer (the agents'
  // cancel probes also see the round's phase in the control block change).
  if (round_->owner != nullptr) round_->owner->abort(round_->id, round_->phase >= msg::RoundPhase::Transfer);
  auto buildAbort = [&] {
    auto& fbb = parts_.outbox.start();
    return msg::CreateAbort(fbb, round_->id, round_->version, reason, fbb.CreateString(detail),
                            fbb.CreateString(agentId));
  };
  const auto bytes = parts_.outbox.stamp(buildAbort());
  for (const RoundSource& source : round_->sources) {
    if (!source.routingId.empty() && parts_.agents.contains(source.routingId)) {
      parts_.outbox.send(source.routingId, bytes);
    }
  }
  for (const Participant& participant : round_->participants) {
    if (parts_.agents.contains(participant.routingId)) parts_.outbox.send(participant.routingId, bytes);
  }
  parts_.outbox.publish(std::string(bus::topics::kRound) + "abort", buildAbort());
  ++parts_.stats.roundsAborted;
  recordOutcome(false, reason, detail);
  log::warn("round {} (version {}) aborted: {}: {}", round_->id, round_->version, msg::EnumNameAbortReason(reason),
            detail);
  if (round_->phase >= msg::RoundPhase::Pause) {
    resumeWorkers(false);
  } else {
    setPhase(msg::RoundPhase::Idle, "aborted");
    round_.reset();
  }
}

void RoundMachine::recordOutcome(bool committed, msg::AbortReason reason, const std::string& detail) {
  history_.push_back(RoundRecord{round_->id, round_->version, firstSource().agentId, committed, reason, detail});
  if (history_.size() > kRoundHistory) history_.pop_front();
}

void RoundMachine::trainerAbort(const AgentRecord& agent, const msg::Abort& abort) {
  if (!round_ || abort.round() != round_->id) return;
  const RoundSource* source = findSource(agent.routingId);
  if (source == nullptr) return;
  abortRound(msg::AbortReason::Requested,
             sourceName(static_cast<std::size_t>(source - round_->sources.data())) +
                 " cancelled: " + clientDetail(abort.detail(), "no reason given"),
             agent.agentId);
}

void RoundMachine::agentGone(const AgentRecord& agent, const std::string& why) {
  if (!round_) return;
  if (const RoundSource* source = findSource(agent.routingId)) {
    abortRound(msg::AbortReason::AgentDied,
               sourceName(static_cast<std::size_t>(source - round_->sources.data())) + ": " + why, agent.agentId);
    return;
  }
  if (findParticipant(agent.routingId) != nullptr) {
    abortRound(msg::AbortReason::AgentDied, "worker '" + agent.agentId + "': " + why, agent.agentId);
  }
}

void RoundMachine::checkDeadline() {
  if (!round_ || parts_.now() < round_->deadline) return;
  std::string missing;
  auto add = [&](const std::string& name) { missing += (missing.empty() ? "" : ", ") + name; };
  for (const Participant& participant : round_->participants) {
    if ((round_->phase == msg::RoundPhase::Pause && !participant.acked) ||
        (round_->phase == msg::RoundPhase::Transfer && !participant.done)) {
      add("'" + participant.agentId + "'");
    }
  }
  for (std::size_t index = 0; index < round_->sources.size(); ++index) {
    const RoundSource& source = round_->sources[index];
    if (round_->phase == msg::RoundPhase::Begin && source.routingId.empty()) {
      add("trainer rank " + std::to_string(index) + " (it never began version " + std::to_string(round_->version) +
          ")");
    }
    if (round_->phase == msg::RoundPhase::Transfer && !source.done) add(sourceName(index));
  }
  abortRound(msg::AbortReason::Timeout,
             std::string("phase ") + msg::EnumNameRoundPhase(round_->phase) + " ran past its timeout; waiting for " +
                 (missing.empty() ? std::string("nobody") : missing),
             {});
}

bool RoundMachine::abort(msg::AbortReason reason, const std::string& detail) {
  if (!round_) return false;
  abortRound(reason, detail, {});
  return true;
}

VersionAnswer RoundMachine::fateOf(std::uint64_t version) const {
  const std::uint64_t committed = committed_.version;
  if (round_ && round_->version == version) {
    return VersionAnswer{
        msg::VersionFate::InProgress, round_->id, msg::AbortReason::None,
        "round " + std::to_string(round_->id) + " is in phase " + msg::EnumNameRoundPhase(round_->phase)};
  }
  const auto record = std::find_if(history_.rbegin(), history_.rend(),
                                   [&](const RoundRecord& entry) { return entry.version == version; });
  if (record != history_.rend()) {
    return VersionAnswer{record->committed ? msg::VersionFate::Committed : msg::VersionFate::Aborted, record->round,
                         record->reason, record->detail};
  }
  if (version == committed) {
    return VersionAnswer{msg::VersionFate::Committed, committed_.round, msg::AbortReason::None,
                         "it is the committed version"};
  }
  if (version > committed) {
    return VersionAnswer{msg::VersionFate::NotCommitted, 0, msg::AbortReason::Lost,
                         "no round of version " + std::to_string(version) +
                             " is known here (its BeginUpdate never arrived, or the coordinator that ran it died) "
                             "and the committed version is " +
                             std::to_string(committed)};
  }
  return VersionAnswer{msg::VersionFate::Superseded, 0, msg::AbortReason::None,
                       "version " + std::to_string(committed) + " is committed, and no record of version " +
                           std::to_string(version) + " is left"};
}

}  // namespace wsync::coordinator
