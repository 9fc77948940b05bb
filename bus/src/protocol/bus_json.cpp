#include "wsync/bus/protocol/bus_json.hpp"

#include <string>

#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/wire_text.hpp"

namespace wsync::bus {

namespace {

std::string digestHex(const msg::Digest128* digest) {
  return digest == nullptr ? std::string() : bus::hex128(digest->hi(), digest->lo());
}

std::string lower(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

nlohmann::json agentJson(const msg::AgentInfo& info) {
  return {{"agent_id", bus::text(info.agent_id())},
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
    out["detail"] = bus::text(agent->detail());
  } else if (const auto* transition = event.as<msg::RoundTransition>()) {
    out["round"] = transition->round();
    out["version"] = transition->version();
    out["phase"] = msg::EnumNameRoundPhase(transition->phase());
    out["workers"] = transition->participants();
    out["detail"] = bus::text(transition->detail());
    out["total_bytes"] = transition->total_bytes();
  } else if (const auto* commit = event.as<msg::Commit>()) {
    out["round"] = commit->round();
    out["version"] = commit->version();
    out["label"] = bus::text(commit->label());
    out["bytes"] = commit->bytes();
    out["digest"] = digestHex(commit->digest());
  } else if (const auto* control = event.as<msg::ControlRequest>()) {
    out["action"] = msg::EnumNameControlAction(control->action());
    if (control->action() == msg::ControlAction::Pause)
      out["pause_mode"] = msg::EnumNamePauseMode(control->pause_mode());
    if (control->action() == msg::ControlAction::Evict) out["agent_id"] = bus::text(control->agent_id());
    out["reason"] = bus::text(control->reason());
  } else if (const auto* abort = event.as<msg::Abort>()) {
    out["round"] = abort->round();
    out["version"] = abort->version();
    out["reason"] = msg::EnumNameAbortReason(abort->reason());
    out["detail"] = bus::text(abort->detail());
    out["agent_id"] = bus::text(abort->agent_id());
  }
  return out;
}

nlohmann::json snapshotJson(std::string_view busName, const msg::SnapshotReply& snapshot) {
  nlohmann::json agents = nlohmann::json::array();
  if (snapshot.agents() != nullptr) {
    for (const auto* agent : *snapshot.agents()) {
      agents.push_back({{"agent_id", bus::text(agent->agent_id())},
                        {"role", lower(msg::EnumNameRole(agent->role()))},
                        {"rank", agent->rank()},
                        {"slot", agent->slot()},
                        {"state", lower(msg::EnumNameAgentState(agent->state()))},
                        {"applied_version", agent->applied_version()},
                        {"heartbeat_age_ms", agent->last_heartbeat_age_ms()},
                        {"transfer_round", agent->transfer_round()},
                        {"transfer_bytes", agent->transfer_bytes()}});
    }
  }
  return {{"bus", std::string(busName)},
          {"epoch", bus::hex64(snapshot.epoch())},
          {"committed_version", snapshot.committed_version()},
          {"committed_label", bus::text(snapshot.committed_label())},
          {"phase", lower(msg::EnumNameRoundPhase(snapshot.phase()))},
          {"round", snapshot.round()},
          {"round_version", snapshot.round_version()},
          {"round_bytes", snapshot.round_bytes()},
          {"paused", snapshot.paused()},
          {"pause_mode", lower(msg::EnumNamePauseMode(snapshot.pause_mode()))},
          {"operator_paused", snapshot.operator_paused()},
          {"agents", agents}};
}

std::string jsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace wsync::bus
