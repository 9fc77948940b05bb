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
  builder.reset();
  sendTo(routingId, stamp(msg::CreateOperatorPause(builder.fbb(), *operatorPause)));
}

void Coordinator::Impl::handleControl(const std::string& source, const bus::Message& message,
                                      const msg::ControlRequest& request) {
  const std::string reason = text(request.reason());
  const std::string because = reason.empty() ? std::string() : " (" + reason + ")";
  std::string detail;
  switch (request.action()) {
    case msg::ControlAction::Pause: {
      const bool already = operatorPause.has_value();
      operatorPause = request.pause_mode();
      // Kept in the control block too: a restarted coordinator holds the pause until an operator resumes.
      block.setOperatorPause(operatorPause);
      // Engines that poll the control block see it at once; the workers' agents get the message.
      block.setPauseState(bus::PauseState{true, *operatorPause, round ? round->id : 0});
      for (const auto& [routingId, agent] : agents.all()) {
        if (agent.role == msg::Role::Worker) sendOperatorPause(routingId);
      }
      detail = std::string(already ? "generation was paused already; mode now " : "generation paused in mode ") +
               msg::EnumNamePauseMode(*operatorPause) + " on " + std::to_string(agents.workerCount()) + " workers" +
               (round ? "; round " + std::to_string(round->id) + " goes on" : std::string());
      break;
    }
    case msg::ControlAction::Resume: {
      if (!operatorPause) {
        ++stats.requestsRejected;
        replyError(source, message.seq(), msg::ErrorCode::NotAllowed, "generation is not paused by an operator");
        return;
      }
      operatorPause.reset();
      block.setOperatorPause(operatorPause);
      // A round in progress keeps its own pause until it resumes the workers itself.
      block.setPauseState(bus::PauseState{round.has_value(), round ? round->mode : msg::PauseMode::Abort,
                                          round ? round->id : 0});
      builder.reset();
      const auto bytes = stamp(msg::CreateOperatorResume(builder.fbb()));
      for (const auto& [routingId, agent] : agents.all()) {
        if (agent.role == msg::Role::Worker) sendTo(routingId, bytes);
      }
      detail = "generation resumed on " + std::to_string(agents.workerCount()) + " workers" +
               (round ? " (round " + std::to_string(round->id) + " still holds them until it ends)" : std::string());
      break;
    }
    case msg::ControlAction::AbortRound: {
      if (!round) {
        ++stats.requestsRejected;
        replyError(source, message.seq(), msg::ErrorCode::NoRound, "no round is in progress");
        return;
      }
      detail = "round " + std::to_string(round->id) + " (version " + std::to_string(round->version) + ") aborted";
      abortRound(msg::AbortReason::Requested, "an operator aborted the round" + because, {});
      break;
    }
    case msg::ControlAction::Evict: {
      const std::string agentId = request.agent_id() ? request.agent_id()->str() : std::string();
      AgentRecord* agent = agents.findById(agentId);
      if (agent == nullptr) {
        ++stats.requestsRejected;
        replyError(source, message.seq(), msg::ErrorCode::UnknownAgent,
                   "no agent '" + bus::printableText(agentId) + "' on this bus");
        return;
      }
      const std::string routingId = agent->routingId;
      // Told why, in case it is alive: its next request is refused as unknown and it may register again.
      replyError(routingId, 0, msg::ErrorCode::NotAllowed, "evicted by an operator" + because);
      removeAgent(routingId, msg::AgentEventKind::Evicted, "evicted by an operator" + because);
      detail = "agent '" + agentId + "' evicted";
      break;
    }
    default:
      ++stats.requestsRejected;
      replyError(source, message.seq(), msg::ErrorCode::Malformed,
                 "unknown control action " + std::to_string(static_cast<int>(request.action())));
      return;
  }
  builder.reset();
  auto& fbb = builder.fbb();
  sendTo(source, builder.finish(msg::CreateControlReply(fbb, request.action(), fbb.CreateString(detail)),
                                bus::EnvelopeStamp{block.epoch(), message.seq()}));
  // The request itself is the event: action, mode, agent, reason.
  builder.reset();
  auto& eventFbb = builder.fbb();
  const auto event = msg::CreateControlRequest(eventFbb, request.action(), request.pause_mode(),
                                               eventFbb.CreateString(text(request.agent_id())),
                                               eventFbb.CreateString(reason));
  publish(bus::topics::topicOf(bus::topics::kBus, msg::EnumNameControlAction(request.action())), event);
  log::info("operator: {}{}", detail, because);
}

}  // namespace wsync::coordinator
