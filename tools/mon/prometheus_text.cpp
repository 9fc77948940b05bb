#include "prometheus_text.hpp"

#include <cinttypes>
#include <cstdio>

namespace wsync::mon {

namespace {

// Label values escape backslash, double quote and newline (the exposition format's rules).
std::string escaped(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string bus) : bus_("bus=\"" + escaped(bus) + "\"") {}

  void family(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& labels, double value) {
    char number[64];
    std::snprintf(number, sizeof number, "%.17g", value);
    out_ += name + "{" + bus_ + (labels.empty() ? "" : "," + labels) + "} " + number + "\n";
  }
  void histogram(const char* name, const char* help, const Histogram& histogram) {
    family(name, "histogram", help);
    for (std::size_t index = 0; index < Histogram::kBounds.size(); ++index) {
      char bound[32];
      std::snprintf(bound, sizeof bound, "%g", Histogram::kBounds[index]);
      sample(std::string(name) + "_bucket", std::string("le=\"") + bound + "\"",
             static_cast<double>(histogram.atMost(index)));
    }
    sample(std::string(name) + "_bucket", "le=\"+Inf\"", static_cast<double>(histogram.count()));
    sample(std::string(name) + "_sum", "", histogram.sum());
    sample(std::string(name) + "_count", "", static_cast<double>(histogram.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string bus_;
  std::string out_;
};

std::string label(const char* name, const std::string& value) {
  return std::string(name) + "=\"" + escaped(value) + "\"";
}

}  // namespace

std::string prometheusText(const BusState& state, const std::string& busName,
                           std::chrono::steady_clock::time_point now) {
  Writer out(busName);
  out.family("wsync_committed_version", "gauge", "The bus's last committed weight version.");
  out.sample("wsync_committed_version", "", static_cast<double>(state.committedVersion()));

  out.family("wsync_agent_applied_version", "gauge", "The version each agent holds (workers) or last saw committed.");
  for (const auto& [id, agent] : state.agents()) {
    out.sample("wsync_agent_applied_version", label("agent", id) + "," + label("role", msg::EnumNameRole(agent.role)),
               static_cast<double>(agent.appliedVersion));
  }
  out.family("wsync_agent_staleness_versions", "gauge", "Committed version minus the worker's applied version.");
  for (const auto& [id, agent] : state.agents()) {
    if (agent.role != msg::Role::Worker) continue;
    const std::uint64_t committed = state.committedVersion();
    out.sample("wsync_agent_staleness_versions", label("agent", id),
               static_cast<double>(committed > agent.appliedVersion ? committed - agent.appliedVersion : 0));
  }
  out.family("wsync_agent_heartbeat_age_seconds", "gauge", "Time since the agent's last sign of life.");
  for (const auto& [id, agent] : state.agents()) {
    const double age =
        static_cast<double>(agent.heartbeatAgeMs) / 1e3 + std::chrono::duration<double>(now - agent.seenAt).count();
    out.sample("wsync_agent_heartbeat_age_seconds", label("agent", id), age);
  }

  // The round in progress: its payload's size and how far the trainer has sent it (0 and 0 when idle).
  const auto& current = state.current();
  const bool transferring = current && current->phase == msg::RoundPhase::Transfer;
  out.family("wsync_round_payload_bytes", "gauge", "The payload of the round in progress, per worker (0: none).");
  out.sample("wsync_round_payload_bytes", "", transferring ? static_cast<double>(current->totalBytes) : 0);
  out.family("wsync_round_bytes_sent", "gauge", "Bytes of that payload the trainer has sent so far.");
  out.sample("wsync_round_bytes_sent", "", transferring ? static_cast<double>(current->bytesSent) : 0);

  const RoundTotals& totals = state.totals();
  out.family("wsync_rounds_total", "counter", "Rounds that ended, by outcome, since the monitor started.");
  out.sample("wsync_rounds_total", label("outcome", "committed"), static_cast<double>(totals.committed));
  out.sample("wsync_rounds_total", label("outcome", "aborted"), static_cast<double>(totals.aborted));
  out.family("wsync_round_aborts_total", "counter", "Aborted rounds by reason, since the monitor started.");
  for (const auto& [reason, count] : totals.abortsByReason) {
    out.sample("wsync_round_aborts_total", label("reason", msg::EnumNameAbortReason(reason)),
               static_cast<double>(count));
  }
  out.family("wsync_bytes_moved_total", "counter", "Payload bytes of committed rounds, times their workers.");
  out.sample("wsync_bytes_moved_total", "", static_cast<double>(totals.bytesMoved));
  out.histogram("wsync_round_duration_seconds", "Committed rounds, begin to commit.", totals.roundSeconds);
  out.histogram("wsync_pause_duration_seconds", "Committed rounds, pause sent to every worker paused.",
                totals.pauseSeconds);
  out.histogram("wsync_transfer_duration_seconds", "Committed rounds, transfer begun to every digest in.",
                totals.transferSeconds);
  out.family("wsync_monitor_event_gaps_total", "counter", "Events the monitor missed (each made it resynchronise).");
  out.sample("wsync_monitor_event_gaps_total", "", static_cast<double>(state.gaps()));
  out.family("wsync_coordinator_up", "gauge", "1 while the coordinator's beat arrives.");
  const bool up = state.coordinatorSeen() && now - state.lastBeat() < std::chrono::seconds(5);
  out.sample("wsync_coordinator_up", "", up ? 1 : 0);
  return out.take();
}

}  // namespace wsync::mon
