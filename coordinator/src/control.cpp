// What an operator asks of the coordinator (wsync-ctl): pause and resume generation outside rounds, abort the round
// in progress, evict an agent. Requests come from connections that need not register, like snapshot requests:
// whoever can reach the request endpoint may steer the bus (ipc endpoints are the owning user's only).
#include <cinttypes>
#include <cstdio>

#include "coordinator_impl.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/topics.hpp"

namespace wsync::coordinator {

namespace {

// What an operator's client said, bounded and printable before it reaches the log and every monitor.
std::string text(const flatbuffers::String* string) {
  return string ? bus::printableText(string->string_view()) : std::string();
}

}  // namespace

void Coordinator::Impl::sendOperatorPause(const std::string& routingId) {
  outbox_.send(routingId, msg::CreateOperatorPause(outbox_.start(), *pause_.operatorPause()));
}

bool Coordinator::Impl::applyOperatorPause(Clock::time_point now) {
  if (!operatorPauseAsked_) return true;
  if (now < nextOperatorPauseChange_) return false;
  operatorPauseAsked_ = false;
  nextOperatorPauseChange_ = now + kOperatorPauseInterval;
  // Engines that poll the control block see it at once; the workers' agents get the message.
  pause_.setOperatorPause(askedOperatorPause_);
  const std::string because = askedOperatorReason_.empty() ? std::string() : " (" + askedOperatorReason_ + ")";
  if (askedOperatorPause_) {
    for (const auto& [routingId, agent] : agents_.all()) {
      if (agent.role == msg::Role::Worker) sendOperatorPause(routingId);
    }
  } else {
    // A round in progress keeps its own pause until it resumes the workers itself.
    const auto bytes = outbox_.stamp(msg::CreateOperatorResume(outbox_.start()));
    for (const auto& [routingId, agent] : agents_.all()) {
      if (agent.role == msg::Role::Worker) outbox_.send(routingId, bytes);
    }
  }
  // The change is the event (action, mode, reason), once per change however many requests asked for it.
  const auto action = askedOperatorPause_ ? msg::ControlAction::Pause : msg::ControlAction::Resume;
  auto& fbb = outbox_.start();
  const auto event = msg::CreateControlRequest(fbb, action, askedOperatorPause_.value_or(msg::PauseMode::Keep),
                                               fbb.CreateString(""), fbb.CreateString(askedOperatorReason_));
  outbox_.publish(bus::topics::topicOf(bus::topics::kBus, msg::EnumNameControlAction(action)), event);
  logLimiter_.info("operator-pause", now, [&] {
    return std::string("operator: generation ") +
           (askedOperatorPause_ ? std::string("paused in mode ") + msg::EnumNamePauseMode(*askedOperatorPause_)
                                : std::string("resumed")) +
           " on " + std::to_string(agents_.workerCount()) + " workers" + because;
  });
  return true;
}

void Coordinator::Impl::handleControl(const std::string& source, const bus::Message& message,
                                      const msg::ControlRequest& request) {
  const std::string reason = text(request.reason());
  const std::string because = reason.empty() ? std::string() : " (" + reason + ")";
  const ActiveRound* round = rounds_.current();
  std::string detail;
  // Said to the operator when the change waits for the last one's interval to pass.
  const std::string coalesced =
      "; applied within " + std::to_string(kOperatorPauseInterval.count()) + " ms of the last change";
  switch (request.action()) {
    case msg::ControlAction::Pause: {
      const bool already = askedOperatorPause_.has_value();
      askedOperatorPause_ = request.pause_mode();
      askedOperatorReason_ = reason;
      operatorPauseAsked_ = true;
      const bool applied = applyOperatorPause(Clock::now());
      detail = std::string(already ? "generation was paused already; mode now " : "generation paused in mode ") +
               msg::EnumNamePauseMode(request.pause_mode()) + " on " + std::to_string(agents_.workerCount()) +
               " workers" + (applied ? std::string() : coalesced) +
               (round ? "; round " + std::to_string(round->id) + " goes on" : std::string());
      break;
    }
    case msg::ControlAction::Resume: {
      if (!askedOperatorPause_) {
        refuse(source, message.seq(), msg::ErrorCode::NotAllowed, "generation is not paused by an operator");
        return;
      }
      askedOperatorPause_.reset();
      askedOperatorReason_ = reason;
      operatorPauseAsked_ = true;
      const bool applied = applyOperatorPause(Clock::now());
      detail = "generation resumed on " + std::to_string(agents_.workerCount()) + " workers" +
               (applied ? std::string() : coalesced) +
               (round ? " (round " + std::to_string(round->id) + " still holds them until it ends)" : std::string());
      break;
    }
    case msg::ControlAction::AbortRound: {
      if (!round) {
        refuse(source, message.seq(), msg::ErrorCode::NoRound, "no round is in progress");
        return;
      }
      detail = "round " + std::to_string(round->id) + " (version " + std::to_string(round->version) + ") aborted";
      rounds_.abort(msg::AbortReason::Requested, "an operator aborted the round" + because);
      break;
    }
    case msg::ControlAction::Evict: {
      const std::string agentId = request.agent_id() ? request.agent_id()->str() : std::string();
      AgentRecord* agent = agents_.findById(agentId);
      if (agent == nullptr) {
        refuse(source, message.seq(), msg::ErrorCode::UnknownAgent,
               "no agent '" + bus::printableText(agentId) + "' on this bus");
        return;
      }
      const std::string routingId = agent->routingId;
      // Told why, in case it is alive: its next request is refused as unknown and it may register again.
      outbox_.refuse(routingId, 0, msg::ErrorCode::NotAllowed, "evicted by an operator" + because,
                     rounds_.committed().version);
      removeAgent(routingId, msg::AgentEventKind::Evicted, "evicted by an operator" + because);
      detail = "agent '" + agentId + "' evicted";
      break;
    }
    default:
      refuse(source, message.seq(), msg::ErrorCode::Malformed,
             "unknown control action " + std::to_string(static_cast<int>(request.action())));
      return;
  }
  auto& fbb = outbox_.start();
  outbox_.reply(source, message.seq(), msg::CreateControlReply(fbb, request.action(), fbb.CreateString(detail)));
  // A pause or resume is published (and logged) as the change it makes, by applyOperatorPause; an abort or an
  // eviction is its own event.
  if (request.action() == msg::ControlAction::AbortRound || request.action() == msg::ControlAction::Evict) {
    auto& eventFbb = outbox_.start();
    const auto event =
        msg::CreateControlRequest(eventFbb, request.action(), request.pause_mode(),
                                  eventFbb.CreateString(text(request.agent_id())), eventFbb.CreateString(reason));
    outbox_.publish(bus::topics::topicOf(bus::topics::kBus, msg::EnumNameControlAction(request.action())), event);
  }
  // Any connection may send these: its lines come through the limiter, as every other client's do.
  logLimiter_.info("operator:" + source, Clock::now(), [&] { return "operator: " + detail + because; });
}

}  // namespace wsync::coordinator
