// The coordinator's loop, its start and its endpoints, snapshots and version queries. Registration and liveness are
// in registration.cpp, the round in round_machine.cpp, an operator's requests in control.cpp.
#include "wsync/coordinator/coordinator.hpp"

#include <malloc.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizer runtimes' allocator keeps its own count (clang declares it in <sanitizer/allocator_interface.h>,
// which GCC 12 does not ship).
extern "C" size_t __sanitizer_get_current_allocated_bytes();  // size_t: <malloc.h>
#endif

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "coordinator_impl.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/clock.hpp"
#include "wsync/bus/core/host_identity.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::coordinator {

std::string_view toString(CoordinatorError error) {
  switch (error) {
    case CoordinatorError::InvalidOptions:
      return "invalid options";
    case CoordinatorError::BusInUse:
      return "bus in use";
    case CoordinatorError::ControlBlock:
      return "control block";
    case CoordinatorError::Channel:
      return "payload channel";
    case CoordinatorError::Transport:
      return "transport";
  }
  return "unknown coordinator error";
}

namespace {

constexpr int kIoThreads = 2;
constexpr std::uint64_t kRequestIoThreads = 0b01;  // ZMQ_AFFINITY bit masks over the I/O threads
constexpr std::uint64_t kEventIoThreads = 0b10;
// After a reset of the request endpoint for memory, the next check waits this long: ZeroMQ frees what the closed
// connections held on its own threads, a moment after the close, and the agents reconnect meanwhile.
constexpr std::chrono::seconds kMemoryResetCooldown{2};

// Bytes this process has allocated and not freed: the heap allocator's own count, which falls as soon as ZeroMQ
// frees a message (the resident size lags behind, and under AddressSanitizer freed memory sits in its quarantine).
std::uint64_t allocatedBytes() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 info = mallinfo2();
  return static_cast<std::uint64_t>(info.uordblks) + static_cast<std::uint64_t>(info.hblkhd);
#endif
}

std::string ipcPath(const std::string& endpoint) {
  constexpr std::string_view kIpc = "ipc://";
  return endpoint.starts_with(kIpc) ? endpoint.substr(kIpc.size()) : std::string();
}

}  // namespace

tl::expected<std::unique_ptr<Coordinator>, CoordinatorFailure> Coordinator::start(const CoordinatorOptions& options) {
  auto busName = bus::validateBusName(options.bus);
  if (!busName) return bus::fail(CoordinatorError::InvalidOptions, busName.error().describe());
  if (options.heartbeatInterval.count() <= 0 || options.heartbeatTimeout <= options.heartbeatInterval) {
    return bus::fail(CoordinatorError::InvalidOptions, "the heartbeat timeout must exceed the interval");
  }
  auto endpoints = bus::resolveEndpoints(options.bus, options.transport);
  if (!endpoints) return bus::fail(CoordinatorError::InvalidOptions, endpoints.error().describe());
  const bool tcp = options.transport.starts_with("tcp://");
  if (tcp && !options.curveKeys && !options.insecure) {
    return bus::fail(CoordinatorError::InvalidOptions,
                     "a tcp bus needs CURVE: a key pair (--curve-keys) and the clients' public keys (--allow-keys); "
                     "--insecure runs it unauthenticated and unencrypted, for a network you trust");
  }
  if (options.curveKeys && !tcp) {
    return bus::fail(CoordinatorError::InvalidOptions,
                     "CURVE keys are for tcp: an ipc bus is reachable only by its user already");
  }
  if (options.curveKeys && options.insecure) {
    return bus::fail(CoordinatorError::InvalidOptions, "--insecure and CURVE keys together: choose one");
  }
  if (options.curveKeys && options.allowedClientKeys.empty()) {
    return bus::fail(CoordinatorError::InvalidOptions, "CURVE without any allowed client key would admit nobody");
  }
  // Agents learn the phase timeouts from their Welcome (32-bit milliseconds, about 49 days).
  constexpr auto kLongestTimeout = std::chrono::milliseconds(std::numeric_limits<std::uint32_t>::max());
  if (options.pauseTimeout.count() <= 0 || options.transferTimeout.count() <= 0 ||
      options.sourcesTimeout.count() <= 0 || options.pauseTimeout > kLongestTimeout ||
      options.transferTimeout > kLongestTimeout || options.sourcesTimeout > kLongestTimeout ||
      options.heartbeatTimeout > kLongestTimeout) {
    return bus::fail(CoordinatorError::InvalidOptions,
                     "the pause, transfer, sources and heartbeat timeouts must be positive "
                     "and under 2^32 ms");
  }
  if (options.link.timeout.count() <= 0) {
    return bus::fail(CoordinatorError::InvalidOptions, "the link timeout must be positive");
  }

  // The control block first: it holds the bus lock, so a second coordinator stops here, before its bind could
  // take over the first one's ipc socket files.
  auto block = bus::ControlBlockOwner::create(options.bus);
  if (!block) {
    const bool inUse = block.error().code == bus::ControlBlockError::BusInUse;
    return bus::fail(inUse ? CoordinatorError::BusInUse : CoordinatorError::ControlBlock, block.error().describe());
  }
  auto channels =
      bus::createChannelOwners(bus::ChannelOwnersConfig{options.bus, options.bucketBytes, options.bufferCount});
  if (!channels) return bus::fail(CoordinatorError::Channel, channels.error().describe());

  // Two I/O threads: the requests and replies of rounds on one, the event stream on the other, so that fanning
  // events out to many monitors never queues a round's messages behind it (docs/architecture.md, "Threads").
  zmq::context_t context(kIoThreads);
  // The ZAP handler before the sockets it guards: a client connecting in between would find nobody to admit it.
  std::unique_ptr<bus::ZapAuthenticator> authenticator;
  if (options.curveKeys) {
    auto started = bus::ZapAuthenticator::start(context, options.allowedClientKeys);
    if (!started) return bus::fail(CoordinatorError::Transport, started.error());
    authenticator = std::move(*started);
  }
  auto router =
      bus::RouterEndpoint::bind(context, endpoints->requests, kRequestIoThreads, options.curveKeys, options.link);
  if (!router) return bus::fail(CoordinatorError::Transport, router.error().describe());
  auto events = bus::EventPublisher::bind(context, endpoints->events, kEventIoThreads, options.curveKeys);
  if (!events) return bus::fail(CoordinatorError::Transport, events.error().describe());

  auto impl = std::make_unique<Impl>(options, std::move(*block), std::move(*channels), std::move(context),
                                     std::move(authenticator), std::move(*router), std::move(*events));
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

Coordinator::Impl::Impl(CoordinatorOptions options, bus::ControlBlockOwner&& block,
                        std::vector<std::unique_ptr<bus::ChannelOwner>>&& channels, zmq::context_t&& context,
                        std::unique_ptr<bus::ZapAuthenticator> authenticator, bus::RouterEndpoint&& router,
                        bus::EventPublisher&& events)
    : options_(std::move(options)),
      block_(std::move(block)),
      context_(std::move(context)),
      authenticator_(std::move(authenticator)),
      router_(std::move(router)),
      events_(std::move(events)),
      wire_(router_, events_),
      outbox_(wire_, block_, agents_, logLimiter_),
      pause_(block_),
      rounds_(RoundMachineParts{options_, block_, agents_, outbox_, pause_, stats_, options_.faultHook,
                                [this](std::chrono::milliseconds outage, const std::string& why) {
                                  rebindRequestEndpoint(outage, why);
                                }},
              std::move(channels)),
      hostname_(bus::thisHost().name) {
  log::setAgent("coordinator");
  if (const auto& replaced = block_.replaced()) {
    // The versions and round numbers go on from where the dead coordinator left them, and so does an operator's
    // pause. Nothing an agent reports changes the committed version: only a commit of this bus does.
    rounds_.carryOver(
        CommittedVersion{replaced->committedVersion, replaced->committedRound, replaced->committedDigest, {}, {}},
        replaced->lastRound);
    pause_.carryOver(replaced->operatorPause);
    askedOperatorPause_ = replaced->operatorPause;
    log::warn("replaced the control block of coordinator pid {}, which died: committed version {}, last round {}{}",
              replaced->creatorPid, replaced->committedVersion, rounds_.lastRound(),
              replaced->operatorPause
                  ? std::string(", generation paused by an operator (mode ") +
                        msg::EnumNamePauseMode(*replaced->operatorPause) + ") until wsync-ctl resume"
                  : std::string());
  }
  block_.beat(bus::monotonicMillis());
  baselineAllocatedBytes_ = allocatedBytes();
}

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Coordinator::~Coordinator() {
  if (!impl_) return;
  impl_->shutdown();
  // libzmq leaves ipc socket files behind; ours go with us so that the runtime folder shows live buses only.
  const std::array<std::string, 2> paths{ipcPath(impl_->requestEndpoint()), ipcPath(impl_->eventEndpoint())};
  impl_.reset();
  for (const auto& path : paths) {
    if (!path.empty()) ::unlink(path.c_str());
  }
}

void Coordinator::step(std::chrono::milliseconds maxWait) { impl_->step(maxWait); }

void Coordinator::run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_acquire)) impl_->step(std::chrono::milliseconds(100));
}

std::uint64_t Coordinator::epoch() const { return impl_->epoch(); }
std::uint64_t Coordinator::committedVersion() const { return impl_->committedVersion(); }
const CoordinatorStats& Coordinator::stats() const { return impl_->stats(); }
std::string Coordinator::requestEndpoint() const { return impl_->requestEndpoint(); }
std::string Coordinator::eventEndpoint() const { return impl_->eventEndpoint(); }

void Coordinator::Impl::step(std::chrono::milliseconds maxWait) {
  const auto until = Clock::now() + maxWait;
  while (true) {
    const auto now = Clock::now();
    if (now >= nextLivenessCheck_) {
      block_.beat(bus::monotonicMillis());
      checkLiveness();
      rounds_.checkDeadline();
      checkReceiveMemory();
      dropUnreachable();
      (void)applyOperatorPause(now);
      logLimiter_.flush(now);
      nextLivenessCheck_ = now + kLivenessCheckInterval;
    }
    if (now >= nextBeat_ || beatChanged()) publishBeat();
    auto wait = std::min({until, nextLivenessCheck_, nextBeat_}) - now;
    if (wait < Clock::duration::zero()) wait = Clock::duration::zero();
    auto received = router_.receive(std::chrono::duration_cast<std::chrono::milliseconds>(wait));
    if (!received) {
      if (received.error().code == bus::TransportError::Interrupted) return;  // a signal: let run() look at stop
      log::error("receive failed: {}", received.error().describe());
      return;
    }
    if (*received) {
      auto& delivery = **received;
      if (delivery.message) {
        handle(delivery.source, delivery.peerKey, *delivery.message);
      } else {
        refuse(delivery.source, 0, msg::ErrorCode::Malformed,
               "message rejected: " + bus::rejectionText(delivery.message.error(), delivery.detail));
      }
    }
    dropUnreachable();
    if (Clock::now() >= until) {
      if (beatChanged()) publishBeat();
      return;
    }
  }
}

void Coordinator::Impl::dropUnreachable() {
  // removeAgent may abort a round, whose messages may find more agents gone.
  while (outbox_.anyUnreachable()) {
    for (const Unreachable& gone : outbox_.takeUnreachable()) {
      removeAgent(gone.routingId, msg::AgentEventKind::Dead, gone.why);
    }
  }
}

void Coordinator::Impl::rebindRequestEndpoint(std::chrono::milliseconds outage, const std::string& why) {
  // The request endpoint only: the event stream is for monitors, and its sequence numbers must not restart.
  const std::string endpoint = router_.endpoint();
  router_.handle().set(zmq::sockopt::linger, 0);  // what was queued is lost, as on a cut link
  { const bus::RouterEndpoint cut = std::move(router_); }
  log::warn("request endpoint {} closed{}: {}", endpoint,
            outage.count() > 0 ? " for " + std::to_string(outage.count()) + " ms" : std::string(), why);
  if (outage.count() > 0) std::this_thread::sleep_for(outage);
  auto rebound = bus::RouterEndpoint::bind(context_, endpoint, kRequestIoThreads, options_.curveKeys, options_.link);
  if (!rebound) {
    // Without its endpoint the coordinator is useless: say so and stop (a supervisor restarts it).
    log::error("cannot bind {} again: {}", endpoint, rebound.error().describe());
    std::abort();
  }
  router_ = std::move(*rebound);
  log::warn("request endpoint {} open again", endpoint);
  // Every agent's connection went with the endpoint, and with it whatever was queued for it: its registration is
  // void. Dropped by dropUnreachable(), once the caller's step of the round is done (a commit in progress finishes
  // first); each registers again on a new connection.
  for (const auto& [routingId, agent] : agents_.all()) {
    outbox_.noteUnreachable(routingId, "its connection went with the request endpoint");
  }
}

void Coordinator::Impl::checkReceiveMemory() {
  const auto now = Clock::now();
  if (options_.receiveMemoryBudget == 0 || now < nextMemoryCheck_) return;
  const std::uint64_t allocated = allocatedBytes();
  if (allocated <= baselineAllocatedBytes_ + options_.receiveMemoryBudget) return;
  // Only ZeroMQ's receive queues grow without a bound of ours: every structure of the coordinator is capped, so
  // this much memory is messages that clients are still sending (a message of many parts arrives whole or not at
  // all). Resetting the endpoint frees them; every agent notices its link lost and registers again.
  ++stats_.endpointResets;
  rebindRequestEndpoint(std::chrono::milliseconds(0),
                        "the coordinator has " + std::to_string(allocated >> 20) + " MiB allocated, " +
                            std::to_string((allocated - baselineAllocatedBytes_) >> 20) +
                            " MiB more than at its start and over the receive budget of " +
                            std::to_string(options_.receiveMemoryBudget >> 20) +
                            " MiB: a client is sending more than the bus takes (a message of many parts?)");
  malloc_trim(0);
  nextMemoryCheck_ = Clock::now() + kMemoryResetCooldown;
}

void Coordinator::Impl::refuse(const std::string& peer, std::uint64_t inReplyTo, msg::ErrorCode code,
                               const std::string& detail) {
  ++stats_.requestsRejected;
  outbox_.refuse(peer, inReplyTo, code, detail, rounds_.committed().version);
}

void Coordinator::Impl::handle(const std::string& source, const std::string& peerKey, const bus::Message& message) {
  // Requests that need no registration. A hello may carry any epoch (it is how a client learns the current one); a
  // control request meant for an earlier coordinator of this bus must not steer this one.
  switch (message.type()) {
    case msg::Body::AgentHello:
      handleHello(source, peerKey, message, *message.as<msg::AgentHello>());
      return;
    case msg::Body::SnapshotRequest:
      handleSnapshotRequest(source);
      return;
    case msg::Body::VersionQuery:
      handleVersionQuery(source, message, *message.as<msg::VersionQuery>());
      return;
    case msg::Body::SlotReport:
      handleSlotReport(source, peerKey, message, *message.as<msg::SlotReport>());
      return;
    case msg::Body::ControlRequest:
      if (message.epoch() != 0 && message.epoch() != block_.epoch()) {
        refuse(source, message.seq(), msg::ErrorCode::StaleEpoch,
               "a control request for the coordinator of epoch " + bus::hex64(message.epoch()) + "; this one's is " +
                   bus::hex64(block_.epoch()) + " (send epoch 0 to mean any)");
        return;
      }
      handleControl(source, message, *message.as<msg::ControlRequest>());
      return;
    default:
      break;
  }
  AgentRecord* const found = agents_.find(source);
  if (found == nullptr) {
    refuse(source, message.seq(), msg::ErrorCode::UnknownAgent,
           std::string(bus::bodyName(message.type())) +
               " from a connection that has not registered: send "
               "AgentHello first");
    return;
  }
  AgentRecord& agent = *found;
  if (agent.peerKey != peerKey) {
    // ZeroMQ keeps routing ids unique among live connections, so this cannot come from the agent's own: a client
    // that took the routing id of a connection that went away speaks for nobody.
    refuse(source, message.seq(), msg::ErrorCode::NotAllowed,
           std::string(bus::bodyName(message.type())) + " for '" + agent.agentId +
               "' from a connection without the CURVE key it registered with");
    return;
  }
  if (message.epoch() != block_.epoch()) {
    // A registered agent stamps the epoch its Welcome gave: anything else is not about this registration.
    refuse(source, message.seq(), msg::ErrorCode::StaleEpoch,
           std::string(bus::bodyName(message.type())) + " of epoch " + bus::hex64(message.epoch()) + " from '" +
               agent.agentId + "', registered under epoch " + bus::hex64(block_.epoch()));
    return;
  }
  agent.lastMessageMs = bus::monotonicMillis();
  switch (message.type()) {
    // The agent's own claim about what it serves, shown as such; it changes no state of the bus.
    case msg::Body::Heartbeat:
      agent.appliedVersion = message.as<msg::Heartbeat>()->applied_version();
      return;
    case msg::Body::BeginUpdate: {
      // A worker that died since the last liveness check (up to kLivenessCheckInterval ago) would get a Pause it
      // can never answer and fail the round: look again now, so that it is left out of the round instead (the soak
      // benchmark's restarts between rounds aborted the next round half of the time without this).
      checkLiveness();
      const AgentRecord* const trainer = agents_.find(source);
      if (trainer == nullptr) return;  // the trainer itself is gone
      rounds_.begin(*trainer, message.seq(), *message.as<msg::BeginUpdate>());
      return;
    }
    case msg::Body::PauseAck:
      rounds_.pauseAck(agent, *message.as<msg::PauseAck>());
      return;
    case msg::Body::UpdateDone:
      rounds_.updateDone(agent, *message.as<msg::UpdateDone>());
      return;
    case msg::Body::Abort:
      rounds_.trainerAbort(agent, *message.as<msg::Abort>());
      return;
    case msg::Body::Goodbye: {
      const auto* goodbye = message.as<msg::Goodbye>();
      removeAgent(source, msg::AgentEventKind::Left,
                  goodbye->reason() ? bus::printableText(goodbye->reason()->string_view()) : std::string("goodbye"));
      return;
    }
    default:
      refuse(source, message.seq(), msg::ErrorCode::NotAllowed,
             std::string("the coordinator does not take ") + bus::bodyName(message.type()) + " from agents");
      return;
  }
}

Coordinator::Impl::BeatState Coordinator::Impl::beatState() const {
  return BeatState{rounds_.committed().version, rounds_.lastRound(), rounds_.phase(), block_.pauseState()};
}

bool Coordinator::Impl::beatChanged() const { return beatState() != lastBeat_; }

void Coordinator::Impl::publishBeat() {
  lastBeat_ = beatState();
  const auto body = msg::CreateCoordinatorBeat(outbox_.start(), lastBeat_.committedVersion, lastBeat_.round,
                                               lastBeat_.phase, agents_.size(), agents_.workerCount(),
                                               lastBeat_.pause.paused, lastBeat_.pause.mode, lastBeat_.pause.round);
  outbox_.publish(std::string(bus::topics::kBus) + "beat", body);
  nextBeat_ = Clock::now() + options_.heartbeatInterval;
}

void Coordinator::Impl::handleSlotReport(const std::string& source, const std::string& peerKey,
                                         const bus::Message& message, const msg::SlotReport& report) {
  // Never answered: the reporting connection reads nothing, and an answer would only queue there. A report that
  // does not match a registration (an agent replaced meanwhile, a coordinator restarted since) is dropped, and so
  // is one that cannot prove it comes from the registration's holder: anyone may learn an agent's id, slot and
  // epoch from a snapshot.
  AgentRecord* const agent = agents_.findById(report.agent_id()->string_view());
  const auto offered = bus::RegistrationSecret::fromMessage(report.registration_secret());
  const char* problem = agent == nullptr                    ? "no agent of that id is registered"
                        : agent->sameHost                   ? "the agent is on this host and writes its slot itself"
                        : agent->slot != report.slot()      ? "the agent holds another slot"
                        : message.epoch() != block_.epoch() ? "it is for another coordinator's epoch"
                        : !agent->secret.matches(offered)   ? "it lacks the registration's secret"
                        : agent->peerKey != peerKey         ? "it comes without the CURVE key the agent registered with"
                                                            : nullptr;
  if (problem != nullptr) {
    ++stats_.requestsRejected;
    logLimiter_.warn("slot-report:" + source, Clock::now(), [&] {
      return "dropped a SlotReport for '" + bus::printableText(report.agent_id()->string_view()) + "': " + problem;
    });
    return;
  }
  const std::uint64_t nowMs = bus::monotonicMillis();
  agent->lastMessageMs = nowMs;
  agent->appliedVersion = report.applied_version();
  // AgentState and AgentPhase share their values (control_block.hpp pins them).
  (void)block_.writeRemoteAgent(
      agent->slot, bus::RemoteAgentState{report.applied_version(), nowMs, static_cast<bus::AgentPhase>(report.state()),
                                         report.transfer_round(), report.transfer_bytes()});
}

void Coordinator::Impl::handleSnapshotRequest(const std::string& source) {
  auto& fbb = outbox_.start();
  std::vector<flatbuffers::Offset<msg::TopicSequence>> sequences;
  for (const auto& [family, seq] : events_.sequences()) {
    sequences.push_back(msg::CreateTopicSequence(fbb, fbb.CreateString(family), seq));
  }
  const std::uint64_t nowMs = bus::monotonicMillis();
  std::vector<flatbuffers::Offset<msg::AgentInfo>> infos;
  for (const auto& [routingId, agent] : agents_.all()) {
    std::uint64_t lastSign = agent.lastMessageMs;
    msg::AgentState state = msg::AgentState::Unknown;
    std::uint64_t transferRound = 0;
    std::uint64_t transferBytes = 0;
    if (const auto slot = block_.agentSlot(agent.slot); slot && slot->agentAttached) {
      lastSign = std::max(lastSign, slot->heartbeatMs);
      // AgentPhase and AgentState share their values (a static_assert in control_block.hpp pins them).
      state = static_cast<msg::AgentState>(slot->phase);
      transferRound = slot->transferRound;
      transferBytes = slot->transferBytes;
    }
    infos.push_back(msg::CreateAgentInfo(
        fbb, fbb.CreateString(agent.agentId), agent.role, agent.slot, agent.rank, block_.appliedVersion(agent.slot),
        static_cast<std::uint32_t>(nowMs > lastSign ? nowMs - lastSign : 0), state, transferRound, transferBytes));
  }
  const auto pause = block_.pauseState();
  const ActiveRound* round = rounds_.current();
  const CommittedVersion& committed = rounds_.committed();
  const auto& operatorPause = pause_.operatorPause();
  const msg::Digest128 digest = round ? bus::toMessage(round->manifestDigest) : msg::Digest128();
  const auto reply = msg::CreateSnapshotReply(
      fbb, fbb.CreateVector(sequences), block_.epoch(), committed.version, fbb.CreateString(committed.label),
      rounds_.phase(), round ? round->id : rounds_.lastRound(), round ? round->version : 0, pause.mode, pause.paused,
      &digest, fbb.CreateVector(infos), round ? round->totalBytes : 0, operatorPause.has_value(),
      operatorPause.value_or(msg::PauseMode::Keep));
  outbox_.send(source, reply);
}

void Coordinator::Impl::handleVersionQuery(const std::string& source, const bus::Message& message,
                                           const msg::VersionQuery& query) {
  const std::uint64_t version = query.version();
  if (version == 0) {
    refuse(source, message.seq(), msg::ErrorCode::InvalidField, "version 0 is never published");
    return;
  }
  const VersionAnswer answer = rounds_.fateOf(version);
  auto& fbb = outbox_.start();
  const auto report = msg::CreateVersionReport(fbb, version, answer.fate, answer.round, answer.reason,
                                               fbb.CreateString(answer.detail), rounds_.committed().version);
  outbox_.reply(source, message.seq(), report);
}

void Coordinator::Impl::shutdown() {
  rounds_.abort(msg::AbortReason::CoordinatorRestart, "the coordinator is stopping");
}

}  // namespace wsync::coordinator
