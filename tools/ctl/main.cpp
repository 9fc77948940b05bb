// wsync-ctl: an operator's commands for a running bus: status, agents, pause, resume, abort, evict. Each is one
// request to the coordinator and its answer; the exit code says how it went (documented in the README).
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/bus_json.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/wire_text.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/bus_request.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"
#include "wsync/cli/curve_flags.hpp"

namespace {

using namespace wsync;

// Exit codes: scripts may rely on them.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;          // the request could not be sent, or the answer made no sense
constexpr int kExitUsage = 2;          // wrong command line
constexpr int kExitNoCoordinator = 3;  // nobody answered within --timeout-ms
constexpr int kExitRefused = 4;        // the coordinator refused (nothing to abort, unknown agent, not paused...)

// A coordinator answers within milliseconds; this covers one that is busy starting or under heavy load.
constexpr std::int64_t kDefaultTimeoutMs = 5000;

std::string lower(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

void printAgents(const msg::SnapshotReply& snapshot) {
  std::printf("%-24s %-8s %5s %5s %-10s %16s %13s\n", "agent", "role", "rank", "slot", "state", "applied version",
              "heartbeat age");
  if (snapshot.agents() == nullptr) return;
  for (const auto* agent : *snapshot.agents()) {
    std::printf("%-24s %-8s %5d %5u %-10s %16" PRIu64 " %10u ms\n", bus::text(agent->agent_id()).c_str(),
                lower(msg::EnumNameRole(agent->role())).c_str(), agent->rank(), agent->slot(),
                lower(msg::EnumNameAgentState(agent->state())).c_str(), agent->applied_version(),
                agent->last_heartbeat_age_ms());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string busName;
  std::string transport = "ipc";
  std::int64_t timeoutMs = kDefaultTimeoutMs;
  bool json = false;
  std::string mode = "keep";
  std::string reason;
  std::string agentId;

  CLI::App app{"wsync-ctl: status and commands for a running wsync bus"};
  app.add_option("--bus", busName, "bus name")->required();
  app.add_option("--transport", transport, "ipc or tcp://HOST:PORT (the coordinator's)")->capture_default_str();
  cli::CurveClientFlags curveFlags;
  curveFlags.addTo(app);
  app.add_option("--timeout-ms", timeoutMs, "how long to wait for the coordinator's answer")
      ->capture_default_str()
      ->check(CLI::Range(1, 3'600'000));
  app.require_subcommand(1);
  auto* status = app.add_subcommand("status", "the committed version, the round in progress, the agents");
  status->add_flag("--json", json, "one JSON object");
  auto* list = app.add_subcommand("agents", "the registered agents");
  list->add_flag("--json", json, "a JSON array");
  auto* pause = app.add_subcommand("pause", "pause generation on every worker until 'resume' (rounds still run)");
  pause->add_option("--mode", mode, "abort | wait | keep: what happens to in-flight requests")
      ->capture_default_str()
      ->check(CLI::IsMember({"abort", "wait", "keep"}));
  auto* resume = app.add_subcommand("resume", "end an operator's pause");
  auto* abort = app.add_subcommand("abort", "abort the round in progress (workers keep their version)");
  auto* evict = app.add_subcommand("evict", "remove an agent from the bus (a stuck one: its round aborts)");
  evict->add_option("agent", agentId, "agent id")->required();
  for (auto* command : {pause, resume, abort, evict}) {
    command->add_option("--reason", reason, "recorded in the events and the coordinator's log");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? kExitOk : kExitUsage;
  }

  auto endpoints = bus::resolveEndpoints(busName, transport);
  if (!endpoints) {
    std::fprintf(stderr, "wsync-ctl: bus '%s': %s\n", busName.c_str(), endpoints.error().describe().c_str());
    return kExitUsage;
  }
  const auto curve = curveFlags.client();
  if (!curve) {
    std::fprintf(stderr, "wsync-ctl: %s\n", curve.error().c_str());
    return kExitUsage;
  }
  zmq::context_t context(1);
  auto dealer = bus::DealerEndpoint::connect(context, endpoints->requests, "wsync-ctl", *curve);
  if (!dealer) {
    std::fprintf(stderr, "wsync-ctl: %s\n", dealer.error().describe().c_str());
    return kExitError;
  }

  const bool wantsSnapshot = status->parsed() || list->parsed();
  msg::ControlAction action = msg::ControlAction::Pause;
  if (resume->parsed()) action = msg::ControlAction::Resume;
  if (abort->parsed()) action = msg::ControlAction::AbortRound;
  if (evict->parsed()) action = msg::ControlAction::Evict;
  const msg::PauseMode pauseMode = mode == "abort"  ? msg::PauseMode::Abort
                                   : mode == "wait" ? msg::PauseMode::Wait
                                                    : msg::PauseMode::Keep;
  constexpr std::uint64_t kRequestSeq = 1;
  bus::MessageBuilder builder;
  auto& fbb = builder.fbb();
  const auto bytes = wantsSnapshot
                         ? builder.finish(msg::CreateSnapshotRequest(fbb), bus::EnvelopeStamp{0, kRequestSeq})
                         : builder.finish(msg::CreateControlRequest(fbb, action, pauseMode,
                                                                    agentId.empty() ? 0 : fbb.CreateString(agentId),
                                                                    reason.empty() ? 0 : fbb.CreateString(reason)),
                                          bus::EnvelopeStamp{0, kRequestSeq});
  auto answer = bus::requestOnce(*dealer, bytes, std::chrono::milliseconds(timeoutMs));
  if (!answer && answer.error().code == bus::RequestError::NoAnswer) {
    std::fprintf(stderr, "wsync-ctl: no coordinator answered on bus '%s' within %lld ms\n", busName.c_str(),
                 static_cast<long long>(timeoutMs));
    return kExitNoCoordinator;
  }
  if (!answer) {
    // A refused handshake's detail says why on its own; the others name their kind first.
    const auto& failure = answer.error();
    std::fprintf(stderr, "wsync-ctl: bus '%s': %s\n", busName.c_str(),
                 (failure.code == bus::RequestError::Refused ? failure.detail : failure.describe()).c_str());
    return kExitError;
  }
  const bus::Message& reply = *answer;
  if (const auto* error = reply.as<msg::Error>()) {
    std::fprintf(stderr, "wsync-ctl: refused: %s: %s\n", msg::EnumNameErrorCode(error->code()),
                 bus::text(error->detail()).c_str());
    return kExitRefused;
  }
  if (wantsSnapshot) {
    const auto* snapshot = reply.as<msg::SnapshotReply>();
    if (snapshot == nullptr) {
      std::fprintf(stderr, "wsync-ctl: unexpected answer %s\n", bus::bodyName(reply.type()));
      return kExitError;
    }
    const nlohmann::json state = bus::snapshotJson(busName, *snapshot);
    if (json) {
      std::printf("%s\n", bus::jsonText(list->parsed() ? state["agents"] : state).c_str());
    } else if (list->parsed()) {
      printAgents(*snapshot);
    } else {
      const std::string label = bus::text(snapshot->committed_label());
      std::printf("bus '%s' (epoch %s): committed version %" PRIu64 "%s\n", busName.c_str(),
                  state["epoch"].get<std::string>().c_str(), snapshot->committed_version(),
                  label.empty() ? "" : (" (" + label + ")").c_str());
      if (snapshot->phase() == msg::RoundPhase::Idle) {
        std::printf("no round in progress\n");
      } else {
        std::printf("round %" PRIu64 " (version %" PRIu64 ") in phase %s\n", snapshot->round(),
                    snapshot->round_version(), lower(msg::EnumNameRoundPhase(snapshot->phase())).c_str());
      }
      std::string generation = "running";
      if (snapshot->operator_paused()) {
        // Held until 'wsync-ctl resume', through rounds and coordinator restarts.
        generation = "paused by an operator (" + lower(msg::EnumNamePauseMode(snapshot->operator_pause_mode())) +
                     ") until 'wsync-ctl resume'";
      } else if (snapshot->paused()) {
        generation = "paused (" + lower(msg::EnumNamePauseMode(snapshot->pause_mode())) + ") for the round";
      }
      std::printf("generation %s\n", generation.c_str());
      printAgents(*snapshot);
    }
    return kExitOk;
  }
  const auto* done = reply.as<msg::ControlReply>();
  if (done == nullptr) {
    std::fprintf(stderr, "wsync-ctl: unexpected answer %s\n", bus::bodyName(reply.type()));
    return kExitError;
  }
  std::printf("%s\n", bus::text(done->detail()).c_str());
  return kExitOk;
}
