#include "bus_state.hpp"

#include <algorithm>

#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/protocol/wire_text.hpp"

namespace wsync::mon {

namespace {

double secondsBetween(std::uint64_t fromNs, std::uint64_t toNs) {
  if (fromNs == 0 || toNs == 0 || toNs < fromNs) return -1;
  return static_cast<double>(toNs - fromNs) / 1e9;
}

AgentView viewOf(const msg::AgentInfo& info, std::chrono::steady_clock::time_point now) {
  AgentView view;
  view.id = bus::text(info.agent_id());
  view.role = info.role();
  view.slot = info.slot();
  view.rank = info.rank();
  view.appliedVersion = info.applied_version();
  view.heartbeatAgeMs = info.last_heartbeat_age_ms();
  view.seenAt = now;
  view.state = info.state();
  view.transferRound = info.transfer_round();
  view.transferBytes = info.transfer_bytes();
  return view;
}

}  // namespace

double CurrentRound::sendRate() const {
  if (!transferSeenAt || progressAt <= *transferSeenAt || bytesSent == 0) return 0;
  return static_cast<double>(bytesSent) / std::chrono::duration<double>(progressAt - *transferSeenAt).count();
}

void BusState::applySnapshot(const bus::Message& reply, std::chrono::steady_clock::time_point now) {
  const auto* snapshot = reply.as<msg::SnapshotReply>();
  if (snapshot == nullptr) return;
  std::map<std::string, std::uint64_t> sequences;
  if (snapshot->event_sequences() != nullptr) {
    for (const auto* sequence : *snapshot->event_sequences())
      sequences[bus::text(sequence->family())] = sequence->seq();
  }
  // A periodic snapshot can be older than events already applied (the events published between the coordinator's
  // reply and this monitor reading it): a part of the state is taken from it only where it is at least as new as
  // the events of its family, so that an old reply never turns a finished round back into a running one.
  const bool refresh = hasSnapshot_ && snapshot->epoch() == epoch_;
  auto newer = [&](std::string_view family) {
    const std::string key(family);
    return !refresh || sequences[key] >= lastSeq_[key];
  };
  const bool takeRound = newer(bus::topics::kRound);
  const bool takeAgents = newer(bus::topics::kAgent);
  if (refresh) {
    for (const auto& [family, seq] : sequences) lastSeq_[family] = std::max(lastSeq_[family], seq);
  } else {
    lastSeq_ = std::move(sequences);
  }
  hasSnapshot_ = true;
  epoch_ = snapshot->epoch();

  if (takeAgents) agents_.clear();
  if (snapshot->agents() != nullptr) {
    for (const auto* info : *snapshot->agents()) {
      AgentView view = viewOf(*info, now);
      // An older table must not bring back an agent that has left since: it only refreshes the known ones.
      if (takeAgents || agents_.contains(view.id)) agents_[view.id] = view;
    }
  }
  if (takeRound) {
    committedVersion_ = snapshot->committed_version();
    committedLabel_ = bus::text(snapshot->committed_label());
    // A round in progress is known by number and phase only: its earlier events are gone.
    if (snapshot->phase() == msg::RoundPhase::Idle) {
      current_.reset();
    } else if (!current_ || current_->round != snapshot->round()) {
      current_ =
          CurrentRound{.round = snapshot->round(), .version = snapshot->round_version(), .phase = snapshot->phase()};
    } else {
      current_->phase = snapshot->phase();
    }
  }
  if (!current_) return;
  CurrentRound& round = *current_;
  if (snapshot->round() == round.round && snapshot->round_bytes() != 0) round.totalBytes = snapshot->round_bytes();
  // Joined mid-transfer: the rate counts from the first sight of it.
  if (round.phase >= msg::RoundPhase::Transfer && !round.transferSeenAt) round.transferSeenAt = now;
  std::uint64_t sent = 0;
  std::optional<std::uint64_t> slowest;
  for (const auto& [id, agent] : agents_) {
    const std::uint64_t bytes = agent.transferRound == round.round ? agent.transferBytes : 0;
    if (agent.role == msg::Role::Trainer) sent = std::max(sent, bytes);
    if (agent.role == msg::Role::Worker) slowest = std::min(slowest.value_or(bytes), bytes);
  }
  round.bytesSent = sent;
  round.slowestReceived = slowest.value_or(0);
  round.progressAt = now;
}

void BusState::noteStamp(const msg::RoundTransition& transition, std::uint64_t sentNs) {
  if (!current_ || current_->round != transition.round()) return;
  CurrentRound& round = *current_;
  switch (transition.phase()) {
    case msg::RoundPhase::Begin:
      round.beganNs = sentNs;
      break;
    case msg::RoundPhase::Pause:
      round.pauseNs = sentNs;
      break;
    case msg::RoundPhase::Transfer:
      round.transferNs = sentNs;
      break;
    case msg::RoundPhase::Verify:
      round.verifyNs = sentNs;
      break;
    default:
      break;
  }
}

BusState::Applied BusState::apply(std::string_view topic, const bus::Message& event,
                                  std::chrono::steady_clock::time_point now) {
  Applied applied = Applied::Used;
  if (hasSnapshot_) {
    if (event.epoch() != epoch_) {
      ++gaps_;  // a restarted coordinator numbers its events afresh: only a new snapshot makes sense of them
      return Applied::Gap;
    }
    const std::string family(bus::topics::familyOf(topic));
    auto& last = lastSeq_[family];
    if (event.seq() <= last) {
      // The snapshot knows the round's phase but not when each phase began: an event it already covers still
      // gives that time, or the round's durations would be lost.
      if (const auto* transition = event.as<msg::RoundTransition>()) {
        noteStamp(*transition, event.envelope().sent_at_ns());
      }
      return Applied::AlreadyInSnapshot;
    }
    if (event.seq() > last + 1) {
      ++gaps_;
      applied = Applied::Gap;
    }
    last = event.seq();
  }
  const std::uint64_t sentNs = event.envelope().sent_at_ns();
  if (const auto* beat = event.as<msg::CoordinatorBeat>()) {
    lastBeat_ = now;
    committedVersion_ = std::max(committedVersion_, beat->committed_version());
  } else if (const auto* agentEvent = event.as<msg::AgentEvent>()) {
    if (agentEvent->agent() != nullptr) {
      AgentView view = viewOf(*agentEvent->agent(), now);
      if (agentEvent->kind() == msg::AgentEventKind::Joined) {
        agents_[view.id] = view;
      } else if (auto found = agents_.find(view.id); found != agents_.end() && found->second.slot == view.slot) {
        agents_.erase(found);  // left, dead, or replaced by a registration whose Joined follows
      }
    }
  } else if (const auto* transition = event.as<msg::RoundTransition>()) {
    if (transition->phase() == msg::RoundPhase::Begin || !current_ || current_->round != transition->round()) {
      current_ = CurrentRound{.round = transition->round(),
                              .version = transition->version(),
                              .phase = transition->phase(),
                              .workers = transition->participants()};
    }
    CurrentRound& round = *current_;
    round.phase = transition->phase();
    round.workers = transition->participants();
    if (transition->total_bytes() != 0) round.totalBytes = transition->total_bytes();
    if (transition->phase() == msg::RoundPhase::Transfer) round.transferSeenAt = now;
    if (transition->phase() == msg::RoundPhase::Idle) {
      current_.reset();
    } else {
      noteStamp(*transition, sentNs);
    }
  } else if (const auto* commit = event.as<msg::Commit>()) {
    committedVersion_ = std::max(committedVersion_, commit->version());
    committedLabel_ = bus::text(commit->label());
    RoundRecord record;
    record.round = commit->round();
    record.version = commit->version();
    record.committed = true;
    record.bytes = commit->bytes();
    finishRound(std::move(record), sentNs);
  } else if (const auto* abort = event.as<msg::Abort>()) {
    RoundRecord record;
    record.round = abort->round();
    record.version = abort->version();
    record.reason = abort->reason();
    record.detail = bus::text(abort->detail());
    finishRound(std::move(record), sentNs);
  }
  return applied;
}

void BusState::finishRound(RoundRecord record, std::uint64_t endedNs) {
  if (current_ && current_->round == record.round) {
    const CurrentRound& round = *current_;
    record.workers = round.workers;
    record.pauseSeconds = secondsBetween(round.pauseNs, round.transferNs);
    record.transferSeconds = secondsBetween(round.transferNs, round.verifyNs);
    record.totalSeconds = secondsBetween(round.beganNs, endedNs);
  }
  if (record.committed) {
    ++totals_.committed;
    totals_.bytesMoved += record.bytes * record.workers;
    // Only a committed round went through every phase; an aborted one's durations would mix in the abort.
    if (record.totalSeconds >= 0) totals_.roundSeconds.observe(record.totalSeconds);
    if (record.pauseSeconds >= 0) totals_.pauseSeconds.observe(record.pauseSeconds);
    if (record.transferSeconds >= 0) totals_.transferSeconds.observe(record.transferSeconds);
  } else {
    ++totals_.aborted;
    ++totals_.abortsByReason[record.reason];
  }
  recent_.push_front(std::move(record));
  if (recent_.size() > kRecentRounds) recent_.pop_back();
}

}  // namespace wsync::mon
