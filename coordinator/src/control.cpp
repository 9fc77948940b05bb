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

void Coordinator::Impl::handleControl(const std::string& source, const bus::Message& message,
                                      const msg::ControlRequest& request) {
  const std::string reason = text(request.reason());
  const std::string because = reason.empty() ? std::string() : " (" + reason + ")";
  const ActiveRound* round = rounds_.current();
  std::string detail;
  switch (request.action()) {
    case msg::ControlAction::Pause: {
      const bool already = pause_.operatorPause().has_value();
      // Engines that poll the control block see it at once; the workers' agents get the message.
      pause_.setOperatorPause(request.pause_mode());
      for (const auto& [routingId, agent] : agents_.all()) {
        if (agent.role == msg::Role::Worker) sendOperatorPause(routingId);
      }
      detail = std::string(already ? "generation was paused already; mode now " : "generation paused in mode ") +
               msg::EnumNamePauseMode(request.pause_mode()) + " on " + std::to_string(agents_.workerCount()) +
               " workers" +
               (round ? "; round " + std::to_string(round->id) + " goes on" : std::string());
      break;
    }
    case msg::ControlAction::Resume: {
      if (!pause_.operatorPause()) {
        refuse(source, message.seq(), msg::ErrorCode::NotAllowed, "generation is not paused by an operator");
        return;
      }
      // A round in progress keeps its own pause until it resumes the workers itself.
      pause_.setOperatorPause(std::nullopt);
      const auto bytes = outbox_.stamp(msg::CreateOperatorResume(outbox_.start()));
      for (const auto& [routingId, agent] : agents_.all()) {
        if (agent.role == msg::Role::Worker) outbox_.send(routingId, bytes);
      }
      detail = "generation resumed on " + std::to_string(agents_.workerCount()) + " workers" +
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
  // The request itself is the event: action, mode, agent, reason.
  auto& eventFbb = outbox_.start();
  const auto event = msg::CreateControlRequest(eventFbb, request.action(), request.pause_mode(),
                                               eventFbb.CreateString(text(request.agent_id())),
                                               eventFbb.CreateString(reason));
  outbox_.publish(bus::topics::topicOf(bus::topics::kBus, msg::EnumNameControlAction(request.action())), event);
  log::info("operator: {}{}", detail, because);
}

}  // namespace wsync::coordinator
