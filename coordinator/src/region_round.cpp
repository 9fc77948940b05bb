// Region rounds (docs/regions.md): a version from several sources (the ranks of a sharded trainer) or to workers
// that bind slices. The round gathers its ranks in Begin, computes the plan every agent will compute, refuses what
// does not fit before any engine pauses, and commits only when every (source, worker) pair agrees on bytes and
// digest. The phases after Begin are the ones every round has (round_machine.cpp).
#include <algorithm>

#include "round_machine.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/region_message.hpp"

namespace wsync::coordinator {

namespace {

std::string workerName(const std::string& agentId) { return "worker '" + agentId + "'"; }

}  // namespace

bool RoundMachine::isRegionBegin(const msg::BeginUpdate& begin) const {
  if (begin.source_count() != 1 || begin.holdings_digest() != nullptr) return true;
  const auto workers = parts_.agents.workersByRank();
  return std::any_of(workers.begin(), workers.end(),
                     [](const AgentRecord* worker) { return worker->bindings != nullptr; });
}

tl::expected<bus::Digest, Refusal> RoundMachine::holdingsOf(const msg::BeginUpdate& begin,
                                                            const bus::Manifest& manifest) {
  auto cache = [&](const bus::Digest& digest, bus::SourceHoldings&& holdings) {
    if (holdings_.find(digest) != holdings_.end()) return;
    if (holdings_.size() >= kMaxCachedHoldings) {
      holdings_.erase(std::min_element(holdings_.begin(), holdings_.end(), [](const auto& a, const auto& b) {
        return a.second.lastUsedRound < b.second.lastUsedRound;
      }));
    }
    holdings_.emplace(digest, CachedHoldings{std::move(holdings), manifest.digest(), roundCounter_});
  };
  if (begin.holdings_digest() == nullptr) {
    // A rank that holds the whole model (a replica, or a trainer of one rank publishing to sliced workers).
    bus::SourceHoldings whole = bus::wholeHoldings(manifest);
    const bus::Digest digest = bus::digestOf(whole);
    cache(digest, std::move(whole));
    return digest;
  }
  const bus::Digest digest = bus::fromMessage(*begin.holdings_digest());
  if (begin.holdings() != nullptr) {
    auto decoded = bus::holdingsFromMessage(*begin.holdings());
    if (!decoded) return tl::unexpected(Refusal{msg::ErrorCode::Malformed, "holdings: " + decoded.error().describe()});
    if (decoded->digest != digest) {
      return tl::unexpected(Refusal{msg::ErrorCode::Malformed, "the holdings sent have digest " +
                                                                   bus::hex(decoded->digest) +
                                                                   ", the BeginUpdate names " + bus::hex(digest)});
    }
    if (decoded->manifest != manifest.digest()) {
      return tl::unexpected(Refusal{msg::ErrorCode::Malformed, "the holdings sent are of manifest " +
                                                                   bus::hex(decoded->manifest) + ", the round's is " +
                                                                   bus::hex(manifest.digest())});
    }
    cache(digest, std::move(decoded->holdings));
  }
  const auto found = holdings_.find(digest);
  if (found == holdings_.end()) {
    return tl::unexpected(Refusal{msg::ErrorCode::UnknownManifest, "holdings " + bus::hex(digest) +
                                                                       " are unknown to this coordinator: send them "
                                                                       "with BeginUpdate"});
  }
  if (found->second.manifest != manifest.digest()) {
    return tl::unexpected(
        Refusal{msg::ErrorCode::InvalidField, "holdings " + bus::hex(digest) + " were declared for manifest " +
                                                  bus::hex(found->second.manifest) +
                                                  ", this BeginUpdate is of manifest " + bus::hex(manifest.digest())});
  }
  found->second.lastUsedRound = roundCounter_ + 1;
  return digest;
}

void RoundMachine::beginRegions(const AgentRecord& trainer, std::uint64_t seq, const msg::BeginUpdate& begin,
                                CachedManifest& cached) {
  const std::uint32_t count = begin.source_count();
  if (count == 0 || count > bus::kMaxSources) {
    refuse(trainer, seq,
           Refusal{msg::ErrorCode::InvalidField, "source_count " + std::to_string(count) + ": a version has 1 to " +
                                                     std::to_string(bus::kMaxSources) + " sources"});
    return;
  }
  if (begin.source_rank() >= count) {
    refuse(trainer, seq,
           Refusal{msg::ErrorCode::InvalidField,
                   "source_rank " + std::to_string(begin.source_rank()) + " of " + std::to_string(count) + " sources"});
    return;
  }
  const bus::ChannelOwner* owner = ownerOf(begin.channel());
  if (owner == nullptr) {
    refuse(trainer, seq,
           Refusal{msg::ErrorCode::NotAllowed,
                   "channel " + bus::channelName(begin.channel()) + " is unknown to this coordinator"});
    return;
  }
  auto holdings = holdingsOf(begin, cached.manifest);
  if (!holdings) {
    refuse(trainer, seq, holdings.error());
    return;
  }
  const bool gpuChannel = owner->tensorMemory() == bus::TensorMemory::Device;
  ActiveRound next;
  next.id = ++roundCounter_;
  next.version = begin.version();
  next.label = begin.label() ? begin.label()->str() : std::string();
  next.manifestDigest = cached.manifest.digest();
  next.totalBytes = cached.manifest.totalBytes();
  next.bucketBytes = gpuChannel ? parts_.options.gpuBucketBytes : parts_.options.bucketBytes;
  next.mode = begin.pause_mode();
  next.regions = true;
  next.channel = begin.channel();
  next.sources.resize(count);
  RoundSource& source = next.sources[begin.source_rank()];
  source.routingId = trainer.routingId;
  source.agentId = trainer.agentId;
  source.holdingsDigest = *holdings;
  noteDeclared(trainer, begin);
  next.begun = parts_.now();
  next.deadline = parts_.now() + parts_.options.sourcesTimeout;
  cached.lastUsedRound = next.id;
  round_ = std::move(next);
  setPhase(msg::RoundPhase::Begin, count == 1 ? std::string() : "waiting for " + std::to_string(count) + " ranks");
  strike(bus::FaultPoint::Begin);
  if (count == 1) planRegions();
}

void RoundMachine::joinRegions(const AgentRecord& trainer, std::uint64_t seq, const msg::BeginUpdate& begin) {
  const std::string firstName = sourceName(static_cast<std::size_t>(&firstSource() - round_->sources.data()));
  const std::string joiner = "trainer rank " + std::to_string(begin.source_rank()) + " ('" + trainer.agentId + "')";
  // A rank that cannot join dooms the round: its ranks are one version, and the others' shards are no version.
  auto reject = [&](msg::ErrorCode code, msg::AbortReason reason, const std::string& detail) {
    refuse(trainer, seq, Refusal{code, detail});
    abortRound(reason, detail, trainer.agentId);
  };
  auto cached = checkBegin(begin);
  if (!cached) {
    reject(cached.error().code, msg::AbortReason::AgentRefused, joiner + " was refused: " + cached.error().detail);
    return;
  }
  auto differs = [&](const std::string& what, const std::string& theirs, const std::string& ours) {
    reject(msg::ErrorCode::InvalidField, msg::AbortReason::LayoutMismatch,
           joiner + " began " + what + " " + theirs + ", " + firstName + " " + ours);
  };
  if (begin.version() != round_->version) {
    differs("version", std::to_string(begin.version()), std::to_string(round_->version));
    return;
  }
  if ((*cached)->manifest.digest() != round_->manifestDigest) {
    differs("manifest", bus::hex((*cached)->manifest.digest()), bus::hex(round_->manifestDigest));
    return;
  }
  if (begin.source_count() != round_->sources.size()) {
    differs("a version of", std::to_string(begin.source_count()) + " ranks", std::to_string(round_->sources.size()));
    return;
  }
  if (begin.channel() != round_->channel) {
    differs("on channel", bus::channelName(begin.channel()), bus::channelName(round_->channel));
    return;
  }
  if (begin.pause_mode() != round_->mode) {
    differs("with pause mode", msg::EnumNamePauseMode(begin.pause_mode()), msg::EnumNamePauseMode(round_->mode));
    return;
  }
  if (begin.source_rank() >= round_->sources.size()) {
    reject(msg::ErrorCode::InvalidField, msg::AbortReason::LayoutMismatch,
           joiner + ": source_rank " + std::to_string(begin.source_rank()) + " of " +
               std::to_string(round_->sources.size()) + " sources");
    return;
  }
  RoundSource& slot = round_->sources[begin.source_rank()];
  if (!slot.routingId.empty()) {
    reject(msg::ErrorCode::InvalidField, msg::AbortReason::LayoutMismatch,
           "trainer rank " + std::to_string(begin.source_rank()) + " began twice: as '" + slot.agentId + "' and as '" +
               trainer.agentId + "'");
    return;
  }
  auto holdings = holdingsOf(begin, (*cached)->manifest);
  if (!holdings) {
    reject(holdings.error().code, msg::AbortReason::AgentRefused, joiner + " was refused: " + holdings.error().detail);
    return;
  }
  slot.routingId = trainer.routingId;
  slot.agentId = trainer.agentId;
  slot.holdingsDigest = *holdings;
  noteDeclared(trainer, begin);
  if (std::all_of(round_->sources.begin(), round_->sources.end(),
                  [](const RoundSource& source) { return !source.routingId.empty(); })) {
    planRegions();
  }
}

void RoundMachine::planRegions() {
  const auto cached = manifests_.find(round_->manifestDigest);
  if (cached == manifests_.end()) {  // kept while its round runs: cannot happen
    abortRound(msg::AbortReason::AgentRefused, "the round's manifest is no longer known", {});
    return;
  }
  const bus::Manifest& manifest = cached->second.manifest;
  const std::vector<const AgentRecord*> workers = parts_.agents.workersByRank();

  std::vector<bus::SourceHoldings> holdings;
  std::vector<std::string> sourceNames;
  for (std::size_t index = 0; index < round_->sources.size(); ++index) {
    const auto found = holdings_.find(round_->sources[index].holdingsDigest);
    if (found == holdings_.end()) {  // this round's are the newest in the cache: cannot happen
      abortRound(msg::AbortReason::AgentRefused, "the holdings of " + sourceName(index) + " are no longer known", {});
      return;
    }
    holdings.push_back(found->second.holdings);
    sourceNames.push_back(sourceName(index));
  }
  // The sources' layout first, so that a refusal says whose regions do not fit: theirs, or a worker's bindings.
  for (std::size_t index = 0; index < holdings.size(); ++index) {
    if (auto checked = bus::checkHoldings(manifest, holdings[index], sourceNames[index]); !checked) {
      abortRound(msg::AbortReason::LayoutMismatch, checked.error().describe(), round_->sources[index].agentId);
      return;
    }
  }
  if (auto covered = bus::checkCoverage(manifest, holdings, sourceNames); !covered) {
    abortRound(msg::AbortReason::LayoutMismatch, covered.error().describe(), {});
    return;
  }
  std::vector<bus::ReceiverBindings> bindings;
  std::vector<std::string> receiverNames;
  for (const AgentRecord* worker : workers) {
    bindings.push_back(worker->bindings != nullptr ? *worker->bindings : bus::wholeBindings(manifest));
    receiverNames.push_back(workerName(worker->agentId));
    // Each worker's bindings alone too, so that the abort names the worker as its agent (as a rank's holdings do
    // above), not only in its text: monitors and the trainer see whom to fix.
    if (auto checked = bus::checkBindings(manifest, bindings.back(), receiverNames.back()); !checked) {
      abortRound(msg::AbortReason::ManifestMismatch, checked.error().describe(), worker->agentId);
      return;
    }
  }
  auto plan = bus::RegionPlan::build(manifest, std::move(holdings), std::move(bindings), sourceNames, receiverNames);
  if (!plan) {  // every input passed its check above: cannot happen
    abortRound(msg::AbortReason::ManifestMismatch, plan.error().describe(), {});
    return;
  }
  round_->plan = std::make_shared<const bus::RegionPlan>(std::move(*plan));

  std::vector<const AgentRecord*> senders;
  for (const RoundSource& source : round_->sources) senders.push_back(parts_.agents.find(source.routingId));
  if (auto prepared = prepareChannel(*round_, round_->channel, senders, workers); !prepared) {
    abortRound(msg::AbortReason::AgentRefused, prepared.error(), {});
    return;
  }
  // Only now do the workers take part: a round refused above was never theirs, and they hear nothing of it.
  for (const AgentRecord* worker : workers) round_->participants.push_back(participantOf(*worker));
  pauseWorkers(manifest);
}

void RoundMachine::sendDeclarations() {
  // Every agent computes the whole plan: a source to cut its segments for everyone, a receiver to know where its
  // deliveries lie among the segments of each source's stream (the shm rings hold every receiver's). Each
  // declaration goes to an agent once (a worker has its own bindings from its hello); later rounds name it by digest.
  const bus::RegionPlan& plan = *round_->plan;
  auto sendIfNew = [&](AgentRecord& agent, const bus::Digest& digest, auto&& build) {
    auto& known = agent.knownDeclarations;
    if (std::find(known.begin(), known.end(), digest) != known.end()) return;
    auto& fbb = parts_.outbox.start();
    parts_.outbox.send(agent.routingId, parts_.outbox.stamp(build(fbb)));
    known.push_back(digest);
    if (known.size() > kMaxKnownDeclarations) known.erase(known.begin());
  };
  auto sendAll = [&](AgentRecord& agent) {
    for (std::uint32_t source = 0; source < plan.sourceCount(); ++source) {
      sendIfNew(agent, round_->sources[source].holdingsDigest, [&](flatbuffers::FlatBufferBuilder& fbb) {
        return bus::toMessage(fbb, plan.holdings(source), round_->manifestDigest);
      });
    }
    for (const Participant& participant : round_->participants) {
      const AgentRecord* worker = parts_.agents.find(participant.routingId);
      if (worker == nullptr || worker->bindings == nullptr) continue;  // whole: every agent knows those
      sendIfNew(agent, worker->bindingsDigest,
                [&](flatbuffers::FlatBufferBuilder& fbb) { return bus::toMessage(fbb, *worker->bindings); });
    }
  };
  for (const RoundSource& source : round_->sources) sendAll(*parts_.agents.find(source.routingId));
  for (const Participant& participant : round_->participants) sendAll(*parts_.agents.find(participant.routingId));
}

void RoundMachine::sendRegionPlans() {
  const bus::ChannelGrant& grant = round_->grant;
  const auto sources = static_cast<std::uint32_t>(round_->sources.size());
  const auto receivers = static_cast<std::uint32_t>(round_->participants.size());
  std::vector<msg::Digest128> holdingsDigests;
  for (const RoundSource& source : round_->sources) holdingsDigests.push_back(bus::toMessage(source.holdingsDigest));
  std::vector<msg::Digest128> bindingsDigests;
  for (const Participant& participant : round_->participants) {
    const AgentRecord* worker = parts_.agents.find(participant.routingId);
    bindingsDigests.push_back(
        bus::toMessage(worker != nullptr && worker->bindings != nullptr ? worker->bindingsDigest : bus::Digest{}));
  }
  // Ranked channels: sources 0..M-1, receivers M..M+N-1.
  auto sendPlan = [&](const std::string& peer, std::int32_t receiver, std::int32_t source) {
    auto& fbb = parts_.outbox.start();
    const msg::Digest128 digest = bus::toMessage(round_->manifestDigest);
    const std::int32_t rank = source >= 0 ? source : static_cast<std::int32_t>(sources) + receiver;
    std::vector<flatbuffers::Offset<flatbuffers::String>> contacts;
    for (const std::string& contact : grant.sourceContacts) contacts.push_back(fbb.CreateString(contact));
    const auto body = msg::CreateTransferPlan(
        fbb, round_->id, round_->version, round_->owner->kind(), &digest, round_->totalBytes, round_->bucketBytes, 0,
        parts_.options.bufferCount, parts_.options.alignment, fbb.CreateString(grant.segment),
        grant.groupId.empty() ? 0 : fbb.CreateVector(grant.groupId), grant.ranked ? rank : -1,
        grant.ranked ? sources + receivers : 0, receiver, receivers,
        grant.senderContact.empty() ? 0 : fbb.CreateString(grant.senderContact), true, source,
        fbb.CreateVectorOfStructs(holdingsDigests), fbb.CreateVectorOfStructs(bindingsDigests),
        contacts.empty() ? 0 : fbb.CreateVector(contacts));
    parts_.outbox.send(peer, parts_.outbox.stamp(body));
  };
  // Receivers first: they are ready to drain before a source has filled its first bucket.
  for (std::uint32_t index = 0; index < receivers; ++index) {
    sendPlan(round_->participants[index].routingId, static_cast<std::int32_t>(index), -1);
  }
  for (std::uint32_t index = 0; index < sources; ++index) {
    sendPlan(round_->sources[index].routingId, -1, static_cast<std::int32_t>(index));
  }
}

void RoundMachine::regionDone(const AgentRecord& agent, const msg::UpdateDone& done) {
  RoundSource* source = findSource(agent.routingId);
  bus::RegionTransferResult pairs = bus::pairsFromMessage(done.pairs());
  const std::size_t expected = source != nullptr ? round_->participants.size() : round_->sources.size();
  if (pairs.size() != expected) {
    const std::string who = source != nullptr ? sourceName(static_cast<std::size_t>(source - round_->sources.data()))
                                              : workerName(agent.agentId);
    abortRound(msg::AbortReason::ByteCountMismatch,
               who + " reported " + std::to_string(pairs.size()) + " peers, the round has " + std::to_string(expected),
               agent.agentId);
    return;
  }
  std::uint64_t bytes = 0;
  for (const bus::PairResult& pair : pairs) bytes += pair.bytes;
  if (source != nullptr) {
    source->done = true;
    source->bytes = bytes;
    source->pairs = std::move(pairs);
  } else {
    Participant* participant = findParticipant(agent.routingId);
    participant->done = true;
    participant->bytes = bytes;
    participant->pairs = std::move(pairs);
  }
  const bool sourcesDone =
      std::all_of(round_->sources.begin(), round_->sources.end(), [](const RoundSource& each) { return each.done; });
  const bool workersDone = std::all_of(round_->participants.begin(), round_->participants.end(),
                                       [](const Participant& each) { return each.done; });
  if (sourcesDone && workersDone) verifyRegionsAndCommit();
}

void RoundMachine::verifyRegionsAndCommit() {
  setPhase(msg::RoundPhase::Verify);
  strike(bus::FaultPoint::Verify);
  const bus::RegionPlan& plan = *round_->plan;
  for (std::uint32_t s = 0; s < plan.sourceCount(); ++s) {
    const RoundSource& source = round_->sources[s];
    for (std::uint32_t r = 0; r < plan.receiverCount(); ++r) {
      Participant& worker = round_->participants[r];
      const std::uint64_t planned = plan.bytes(s, r);
      const bus::PairResult& sent = source.pairs[r];
      const bus::PairResult& taken = worker.pairs[s];
      if (sent.bytes != planned) {
        abortRound(msg::AbortReason::ByteCountMismatch,
                   sourceName(s) + " sent " + workerName(worker.agentId) + " " + std::to_string(sent.bytes) +
                       " bytes, the plan has " + std::to_string(planned),
                   source.agentId);
        return;
      }
      if (taken.bytes != planned) {
        abortRound(msg::AbortReason::ByteCountMismatch,
                   workerName(worker.agentId) + " took " + std::to_string(taken.bytes) + " bytes from " +
                       sourceName(s) + ", the plan has " + std::to_string(planned),
                   worker.agentId);
        return;
      }
      if (taken.digest != sent.digest) {
        abortRound(msg::AbortReason::DigestMismatch,
                   workerName(worker.agentId) + " took bytes with digest " + bus::hex(taken.digest) + " from " +
                       sourceName(s) + ", which sent digest " + bus::hex(sent.digest),
                   worker.agentId);
        return;
      }
    }
  }
  for (Participant& worker : round_->participants) worker.receiverDigest = bus::receiverDigestOf(worker.pairs);
  std::vector<bus::Digest> holdings;
  std::vector<bus::RegionTransferResult> sent;
  for (const RoundSource& source : round_->sources) {
    holdings.push_back(source.holdingsDigest);
    sent.push_back(source.pairs);
  }
  round_->versionDigest = bus::versionDigestOf(holdings, sent);
  announceCommit();
}

void RoundMachine::noteDeclared(const AgentRecord& trainer, const msg::BeginUpdate& begin) {
  // Holdings a rank declared itself are not sent back to it.
  if (begin.holdings_digest() == nullptr) return;
  AgentRecord* agent = parts_.agents.find(trainer.routingId);
  const bus::Digest digest = bus::fromMessage(*begin.holdings_digest());
  auto& known = agent->knownDeclarations;
  if (std::find(known.begin(), known.end(), digest) == known.end()) known.push_back(digest);
}

void RoundMachine::forgetDeclarations(const std::string& routingId) {
  if (AgentRecord* agent = parts_.agents.find(routingId)) agent->knownDeclarations.clear();
}

}  // namespace wsync::coordinator
