#pragma once
// The coordinator's parts and the loop that drives them. Each part owns its state: the agent registry (who is
// registered, on which connection, with which rank), the round machine (the round in progress, the committed
// version, the manifests), the pause word (who holds generation paused) and the outbox (the one way a message
// leaves). The loop here receives requests, registers agents, checks liveness and answers snapshots and an
// operator's requests. Threading: the coordinator's one thread.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "agent_registry.hpp"
#include "outbox.hpp"
#include "pause_word.hpp"
#include "round_machine.hpp"
#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/log_limiter.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/transport/event_publisher.hpp"
#include "wsync/bus/transport/router_endpoint.hpp"
#include "wsync/bus/transport/zap_authenticator.hpp"
#include "wsync/coordinator/coordinator.hpp"

namespace wsync::coordinator {

class Coordinator::Impl {
 public:
  // Takes what Coordinator::start() created; carries on from a dead coordinator's block where it replaced one.
  Impl(CoordinatorOptions options, bus::ControlBlockOwner&& block,
       std::vector<std::unique_ptr<bus::ChannelOwner>>&& channels, zmq::context_t&& context,
       std::unique_ptr<bus::ZapAuthenticator> authenticator, bus::RouterEndpoint&& router,
       bus::EventPublisher&& events);

  void step(std::chrono::milliseconds maxWait);
  // Aborts a round in progress: its agents learn why instead of waiting for a coordinator that is gone.
  void shutdown();

  std::uint64_t epoch() const { return block_.epoch(); }
  std::uint64_t committedVersion() const { return rounds_.committed().version; }
  const CoordinatorStats& stats() const { return stats_; }
  std::string requestEndpoint() const { return router_.endpoint(); }
  std::string eventEndpoint() const { return events_.endpoint(); }

 private:
  // coordinator.cpp: the requests, snapshots, version queries and the request endpoint.
  // `peerKey`: the sender's CURVE key (bus::Received::peerKey), empty without CURVE.
  void handle(const std::string& source, const std::string& peerKey, const bus::Message& message);
  void handleSnapshotRequest(const std::string& source);
  void handleVersionQuery(const std::string& source, const bus::Message& message, const msg::VersionQuery& query);
  // The "bus/beat" event: every heartbeat interval, and as soon as what it carries changes (agents on other hosts
  // mirror the bus from it, docs/hosts.md).
  void publishBeat();
  bool beatChanged() const;
  // An agent on another host reports its slot (SlotReport, on a connection of its own): written into the control
  // block for it, and taken as a sign of life.
  // Only a report that carries the agent's registration secret (and comes with its CURVE key) speaks for it.
  void handleSlotReport(const std::string& source, const std::string& peerKey, const bus::Message& message,
                        const msg::SlotReport& report);
  // The request endpoint's memory budget (CoordinatorOptions::receiveMemoryBudget): checked every liveness pass.
  void checkReceiveMemory();
  // Closes the request endpoint (every connection and what ZeroMQ held for it goes), stays closed for `outage`, and
  // binds it again. Agents find their link lost and register again.
  void rebindRequestEndpoint(std::chrono::milliseconds outage, const std::string& why);
  // Removes the agents the outbox found unreachable: their next message is refused as unknown and they register
  // again.
  void dropUnreachable();
  // A refused request: counted, and answered with an Error.
  void refuse(const std::string& peer, std::uint64_t inReplyTo, msg::ErrorCode code, const std::string& detail);

  // registration.cpp: joining, liveness, leaving.
  void handleHello(const std::string& source, const std::string& peerKey, const bus::Message& message,
                   const msg::AgentHello& hello);
  // Whether a hello for an id that `holder` holds may replace it now (`why` says why, or why not): when it proves
  // itself the holder, or when the holder is gone.
  bool mayReplace(const AgentRecord& holder, const std::string& peerKey, const msg::AgentHello& hello,
                  std::uint64_t nowMs, std::string& why) const;
  // Why this hello cannot register (the field and the limit it breaks), or empty when it can.
  std::string helloProblem(const msg::AgentHello& hello) const;
  // Why one more worker offering these channels would exceed what a round on one of them can take, or empty.
  std::string admissionProblem(const msg::AgentHello& hello) const;
  std::optional<std::uint32_t> freeSlot();
  bool isAlive(const AgentRecord& agent, std::uint64_t nowMs, std::string& why) const;
  // Removes every agent whose process is gone or whose heartbeat is overdue.
  void checkLiveness();
  void removeAgent(const std::string& routingId, msg::AgentEventKind kind, const std::string& detail);
  void publishAgentEvent(const AgentRecord& agent, msg::AgentEventKind kind, const std::string& detail);

  // control.cpp: an operator's requests (wsync-ctl).
  void handleControl(const std::string& source, const bus::Message& message, const msg::ControlRequest& request);
  void sendOperatorPause(const std::string& routingId);
  // Applies the operator's pause last asked for (the pause word, the workers, the event) when a request came since
  // the last time, unless that was less than kOperatorPauseInterval ago; the liveness pass calls it again until it
  // is done. Returns whether it is. A request for the state that holds is sent again all the same: an engine whose
  // pause hook failed is asked again, as before requests were coalesced.
  bool applyOperatorPause(Clock::time_point now);

  const CoordinatorOptions options_;
  bus::ControlBlockOwner block_;
  zmq::context_t context_;
  // tcp with CURVE: admits the allowed client keys (declared after the context: it must close its socket first).
  std::unique_ptr<bus::ZapAuthenticator> authenticator_;
  bus::RouterEndpoint router_;
  bus::EventPublisher events_;
  EndpointWire wire_;  // the outbox's way out, through the two above
  // Log lines a client can cause (a reply it does not read, a refused connection) come at most a few per interval.
  bus::LogLimiter logLimiter_;
  CoordinatorStats stats_;
  AgentRegistry agents_;
  Outbox outbox_;
  PauseWord pause_;
  // The operator's pause as last asked for (wsync-ctl pause / resume), and why: what pause_ holds follows it at a
  // bounded rate, so that a client asking in a loop costs each worker a few engine pauses a second at most, and the
  // workers end in the state asked for last.
  std::optional<msg::PauseMode> askedOperatorPause_;
  std::string askedOperatorReason_;
  bool operatorPauseAsked_ = false;  // a pause or resume request came since the last one was applied
  Clock::time_point nextOperatorPauseChange_{};
  RoundMachine rounds_;
  const std::string hostname_;
  // What the last beat said (committed version, round, phase, pause word): a change is published at once.
  struct BeatState {
    std::uint64_t committedVersion = 0;
    std::uint64_t round = 0;
    msg::RoundPhase phase = msg::RoundPhase::Idle;
    bus::PauseState pause{};
    friend bool operator==(const BeatState&, const BeatState&) = default;
  };
  BeatState beatState() const;
  BeatState lastBeat_{};
  std::uint64_t baselineAllocatedBytes_ = 0;  // the coordinator's heap once started
  Clock::time_point nextMemoryCheck_{};
  Clock::time_point nextLivenessCheck_{};
  Clock::time_point nextBeat_{};  // the next "bus/beat" event
};

}  // namespace wsync::coordinator
