#include "event_json.hpp"
#include "wsync/bus/core/text.hpp"

#include <cinttypes>
#include <cstdio>
#include <string>

namespace wsync::mon {

namespace {

std::string text(const flatbuffers::String* string) { return string ? string->str() : std::string(); }

std::string digestHex(const msg::Digest128* digest) {
  return digest == nullptr ? std::string() : bus::hex128(digest->hi(), digest->lo());
}

nlohmann::json agentJson(const msg::AgentInfo& info) {
  return {{"agent_id", text(info.agent_id())},
          {"role", msg::EnumNameRole(info.role())},
          {"slot", info.slot()},
          {"rank", info.rank()},
          {"applied_version", info.applied_version()},
          {"heartbeat_age_ms", info.last_heartbeat_age_ms()},
          {"state", msg::EnumNameAgentState(info.state())}};
}

}  // namespace

nlohmann::json eventJson(std::string_view topic, const bus::Message& event) {
  nlohmann::json out{{"topic", std::string(topic)},
                     {"seq", event.seq()},
                     {"epoch", bus::hex64(event.epoch())},
                     {"sent_at_ns", event.envelope().sent_at_ns()},
                     {"type", bus::bodyName(event.type())}};
  if (const auto* beat = event.as<msg::CoordinatorBeat>()) {
    out["committed_version"] = beat->committed_version();
    out["round"] = beat->round();
    out["phase"] = msg::EnumNameRoundPhase(beat->phase());
    out["agents"] = beat->agents();
    out["workers"] = beat->workers();
  } else if (const auto* agent = event.as<msg::AgentEvent>()) {
    out["kind"] = msg::EnumNameAgentEventKind(agent->kind());
    if (agent->agent() != nullptr) out["agent"] = agentJson(*agent->agent());
    out["detail"] = text(agent->detail());
  } else if (const auto* transition = event.as<msg::RoundTransition>()) {
    out["round"] = transition->round();
    out["version"] = transition->version();
    out["phase"] = msg::EnumNameRoundPhase(transition->phase());
    out["workers"] = transition->participants();
    out["detail"] = text(transition->detail());
    out["total_bytes"] = transition->total_bytes();
  } else if (const auto* commit = event.as<msg::Commit>()) {
    out["round"] = commit->round();
    out["version"] = commit->version();
    out["label"] = text(commit->label());
    out["bytes"] = commit->bytes();
    out["digest"] = digestHex(commit->digest());
  } else if (const auto* control = event.as<msg::ControlRequest>()) {
    out["action"] = msg::EnumNameControlAction(control->action());
    if (control->action() == msg::ControlAction::Pause) out["pause_mode"] = msg::EnumNamePauseMode(control->pause_mode());
    if (control->action() == msg::ControlAction::Evict) out["agent_id"] = text(control->agent_id());
    out["reason"] = text(control->reason());
  } else if (const auto* abort = event.as<msg::Abort>()) {
    out["round"] = abort->round();
    out["version"] = abort->version();
    out["reason"] = msg::EnumNameAbortReason(abort->reason());
    out["detail"] = text(abort->detail());
    out["agent_id"] = text(abort->agent_id());
  }
  return out;
}

}  // namespace wsync::mon
