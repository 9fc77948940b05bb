// The coordinator's loop, registration, liveness and snapshots. The round itself is in round.cpp.
#include "wsync/coordinator/coordinator.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "coordinator_impl.hpp"
#include "wsync/bus/bus_address.hpp"
#include "wsync/bus/clock.hpp"
#include "wsync/bus/protocol.hpp"
#include "wsync/bus/topics.hpp"

namespace wsync::coordinator {

std::string_view toString(CoordinatorError error) {
  switch (error) {
    case CoordinatorError::InvalidOptions: return "invalid options";
    case CoordinatorError::BusInUse: return "bus in use";
    case CoordinatorError::ControlBlock: return "control block";
    case CoordinatorError::Arena: return "shm arena";
    case CoordinatorError::Transport: return "transport";
  }
  return "unknown coordinator error";
}

namespace {

constexpr int kIoThreads = 2;
constexpr std::uint64_t kRequestIoThreads = 0b01;  // ZMQ_AFFINITY bit masks over the I/O threads
constexpr std::uint64_t kEventIoThreads = 0b10;

std::string hostName() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return {};
  return name.data();
}

// The arena of a bus, per user like the control block: "wsync-<uid>-<bus>-shm".
std::string arenaSegmentName(std::string_view busName) {
  return "wsync-" + std::to_string(getuid()) + "-" + std::string(busName) + "-shm";
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

  // The control block first: it holds the bus lock, so a second coordinator stops here, before its bind could
  // take over the first one's ipc socket files.
  auto block = bus::ControlBlockOwner::create(options.bus);
  if (!block) {
    const bool inUse = block.error().code == bus::ControlBlockError::BusInUse;
    return bus::fail(inUse ? CoordinatorError::BusInUse : CoordinatorError::ControlBlock,
                     block.error().describe());
  }
  auto arena = bus::ShmArena::create(arenaSegmentName(options.bus),
                                     bus::ArenaGeometry{options.bucketBytes, options.bufferCount,
                                                        static_cast<std::uint32_t>(bus::kMaxArenaReceivers)});
  if (!arena) return bus::fail(CoordinatorError::Arena, arena.error().describe());

  // Two I/O threads: the requests and replies of rounds on one, the event stream on the other, so that fanning
  // events out to many monitors never queues a round's messages behind it (bench/results/monitors-*).
  zmq::context_t context(kIoThreads);
  // The ZAP handler before the sockets it guards: a client connecting in between would find nobody to admit it.
  std::unique_ptr<bus::ZapAuthenticator> authenticator;
  if (options.curveKeys) {
    auto started = bus::ZapAuthenticator::start(context, options.allowedClientKeys);
    if (!started) return bus::fail(CoordinatorError::Transport, started.error());
    authenticator = std::move(*started);
  }
  auto router = bus::RouterEndpoint::bind(context, endpoints->requests, kRequestIoThreads, options.curveKeys);
  if (!router) return bus::fail(CoordinatorError::Transport, router.error().describe());
  auto events = bus::EventPublisher::bind(context, endpoints->events, kEventIoThreads, options.curveKeys);
  if (!events) return bus::fail(CoordinatorError::Transport, events.error().describe());

  auto impl = std::make_unique<Impl>(options, std::move(*block), std::move(*arena), std::move(context),
                                     std::move(*router), std::move(*events));
  impl->authenticator = std::move(authenticator);
  impl->hostname = hostName();
  log::setAgent("coordinator");
  if (const auto& replaced = impl->block.replaced()) {
    // The versions and round numbers go on from where the dead coordinator left them; the agents' reports can
    // only raise the committed version further (handleHello).
    impl->committedVersion = replaced->committedVersion;
    impl->roundCounter = std::max(replaced->committedRound, replaced->lastRound);
    log::setVersion(impl->committedVersion);
    log::warn("replaced the control block of coordinator pid {}, which died: committed version {}, last round {}",
              replaced->creatorPid, replaced->committedVersion, impl->roundCounter);
  }
  impl->block.beat(bus::monotonicMillis());
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Coordinator::~Coordinator() {
  if (!impl_) return;
  impl_->shutdown();
  // libzmq leaves ipc socket files behind; ours go with us so that the runtime folder shows live buses only.
  const std::array<std::string, 2> paths{ipcPath(impl_->router.endpoint()), ipcPath(impl_->events.endpoint())};
  impl_.reset();
  for (const auto& path : paths) {
    if (!path.empty()) ::unlink(path.c_str());
  }
}

void Coordinator::step(std::chrono::milliseconds maxWait) { impl_->step(maxWait); }

void Coordinator::run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_acquire)) impl_->step(std::chrono::milliseconds(100));
}

std::uint64_t Coordinator::epoch() const { return impl_->block.epoch(); }
std::uint64_t Coordinator::committedVersion() const { return impl_->committedVersion; }
const CoordinatorStats& Coordinator::stats() const { return impl_->stats; }
std::string Coordinator::requestEndpoint() const { return impl_->router.endpoint(); }
std::string Coordinator::eventEndpoint() const { return impl_->events.endpoint(); }

void Coordinator::Impl::step(std::chrono::milliseconds maxWait) {
  const auto until = Clock::now() + maxWait;
  while (true) {
    const auto now = Clock::now();
    if (now >= nextLivenessCheck) {
      block.beat(bus::monotonicMillis());
      checkLiveness();
      checkRoundDeadline();
      dropUnreachable();
      nextLivenessCheck = now + kLivenessCheckInterval;
    }
    if (now >= nextBeat) {
      publishBeat();
      nextBeat = now + options.heartbeatInterval;
    }
    auto wait = std::min({until, nextLivenessCheck, nextBeat}) - now;
    if (wait < Clock::duration::zero()) wait = Clock::duration::zero();
    auto received = router.receive(std::chrono::duration_cast<std::chrono::milliseconds>(wait));
    if (!received) {
      if (received.error().code == bus::TransportError::Interrupted) return;  // a signal: let run() look at stop
      log::error("receive failed: {}", received.error().describe());
      return;
    }
    if (*received) {
      auto& delivery = **received;
      if (delivery.message) {
        handle(delivery.source, *delivery.message);
      } else {
        ++stats.requestsRejected;
        replyError(delivery.source, 0, msg::ErrorCode::Malformed,
                   "message rejected: " + bus::rejectionText(delivery.message.error(), delivery.detail));
      }
    }
    dropUnreachable();
    if (Clock::now() >= until) return;
  }
}

void Coordinator::Impl::sendTo(const std::string& peer, std::span<const std::uint8_t> bytes) {
  auto sent = router.send(peer, bytes);
  if (sent) return;
  if (sent.error().code != bus::TransportError::PeerUnreachable) {
    log::warn("send to {} failed: {}", peer, sent.error().describe());
  } else if (agents.contains(peer) &&
             std::find(unreachable.begin(), unreachable.end(), peer) == unreachable.end()) {
    unreachable.push_back(peer);
  }
}

void Coordinator::Impl::dropUnreachable() {
  // removeAgent may abort a round, whose messages may find more agents gone.
  while (!unreachable.empty()) {
    const std::string peer = unreachable.back();
    unreachable.pop_back();
    removeAgent(peer, msg::AgentEventKind::Dead, "its connection is gone: a message to it could not be delivered");
  }
}

void Coordinator::Impl::dropConnections(std::chrono::milliseconds outage) {
  // The request endpoint only: the event stream is for monitors, and its sequence numbers must not restart.
  const std::string endpoint = router.endpoint();
  router.handle().set(zmq::sockopt::linger, 0);  // what was queued is lost, as on a cut link
  {
    const bus::RouterEndpoint cut = std::move(router);
  }
  log::warn("request endpoint {} closed for {} ms", endpoint, outage.count());
  std::this_thread::sleep_for(outage);
  auto rebound = bus::RouterEndpoint::bind(context, endpoint, kRequestIoThreads, options.curveKeys);
  if (!rebound) {
    // Only a test fault gets here; without its endpoint the coordinator is useless, so say so and stop.
    log::error("cannot bind {} again after the outage: {}", endpoint, rebound.error().describe());
    std::abort();
  }
  router = std::move(*rebound);
  log::warn("request endpoint {} open again", endpoint);
}

void Coordinator::Impl::replyError(const std::string& peer, std::uint64_t inReplyTo, msg::ErrorCode code,
                                   const std::string& detail) {
  builder.reset();
  auto& fbb = builder.fbb();
  const auto body = msg::CreateError(fbb, code, fbb.CreateString(detail), inReplyTo);
  sendTo(peer, builder.finish(body, bus::EnvelopeStamp{block.epoch(), nextSeq()}));
}

void Coordinator::Impl::handle(const std::string& source, const bus::Message& message) {
  switch (message.type()) {
    case msg::Body::AgentHello: handleHello(source, message, *message.as<msg::AgentHello>()); return;
    case msg::Body::SnapshotRequest: handleSnapshotRequest(source, message); return;
    case msg::Body::ControlRequest: handleControl(source, message, *message.as<msg::ControlRequest>()); return;
    default: break;
  }
  const auto found = agents.find(source);
  if (found == agents.end()) {
    ++stats.requestsRejected;
    replyError(source, message.seq(), msg::ErrorCode::UnknownAgent,
               std::string(bus::bodyName(message.type())) + " from a connection that has not registered: send "
               "AgentHello first");
    return;
  }
  AgentRecord& agent = found->second;
  agent.lastMessageMs = bus::monotonicMillis();
  switch (message.type()) {
    case msg::Body::Heartbeat: agent.appliedVersion = message.as<msg::Heartbeat>()->applied_version(); return;
    case msg::Body::BeginUpdate: handleBegin(source, message, *message.as<msg::BeginUpdate>()); return;
    case msg::Body::PauseAck: handlePauseAck(agent, *message.as<msg::PauseAck>()); return;
    case msg::Body::UpdateDone: handleUpdateDone(agent, *message.as<msg::UpdateDone>()); return;
    case msg::Body::Abort: handleTrainerAbort(agent, *message.as<msg::Abort>()); return;
    case msg::Body::Goodbye: {
      const auto* goodbye = message.as<msg::Goodbye>();
      removeAgent(source, msg::AgentEventKind::Left,
                  goodbye->reason() ? goodbye->reason()->str() : std::string("goodbye"));
      return;
    }
    default:
      ++stats.requestsRejected;
      replyError(source, message.seq(), msg::ErrorCode::NotAllowed,
                 std::string("the coordinator does not take ") + bus::bodyName(message.type()) + " from agents");
      return;
  }
}

AgentRecord* Coordinator::Impl::findById(const std::string& agentId) {
  for (auto& [routingId, agent] : agents) {
    if (agent.agentId == agentId) return &agent;
  }
  return nullptr;
}

std::uint32_t Coordinator::Impl::workerCount() const {
  return static_cast<std::uint32_t>(
      std::count_if(agents.begin(), agents.end(), [](const auto& entry) { return entry.second.role == msg::Role::Worker; }));
}

std::optional<std::uint32_t> Coordinator::Impl::freeSlot() {
  if (auto slot = block.findFreeSlot()) return slot;
  // Slots of dead agents stay visible to monitors until they are needed.
  for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
    const auto snapshot = block.agentSlot(slot);
    if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Dead) return slot;
  }
  return std::nullopt;
}

std::optional<std::int32_t> Coordinator::Impl::freeRank(msg::Role role, std::int32_t requested, std::string& why) {
  auto holderOf = [&](std::int32_t rank) -> const AgentRecord* {
    for (const auto& [routingId, agent] : agents) {
      if (agent.role == role && agent.rank == rank) return &agent;
    }
    return nullptr;
  };
  if (requested >= 0) {
    if (const AgentRecord* holder = holderOf(requested)) {
      why = "rank " + std::to_string(requested) + " of the " + msg::EnumNameRole(role) + "s is held by '" +
            holder->agentId + "'";
      return std::nullopt;
    }
    return requested;
  }
  for (std::int32_t rank = 0;; ++rank) {
    if (holderOf(rank) == nullptr) return rank;
  }
}

bool Coordinator::Impl::isAlive(const AgentRecord& agent, std::uint64_t nowMs, std::string& why) const {
  if (agent.sameHost && !bus::isAlive(agent.process)) {
    why = "process " + std::to_string(agent.process.pid) + " is gone";
    return false;
  }
  std::uint64_t lastSign = agent.lastMessageMs;
  if (const auto slot = block.agentSlot(agent.slot); slot && slot->agentAttached) {
    lastSign = std::max(lastSign, slot->heartbeatMs);
  }
  const auto timeoutMs = static_cast<std::uint64_t>(options.heartbeatTimeout.count());
  if (nowMs > lastSign + timeoutMs) {
    why = "no heartbeat for " + std::to_string(nowMs - lastSign) + " ms (timeout " + std::to_string(timeoutMs) +
          " ms)";
    return false;
  }
  return true;
}

void Coordinator::Impl::handleHello(const std::string& source, const bus::Message& message,
                                    const msg::AgentHello& hello) {
  const std::uint64_t seq = message.seq();
  const std::string agentId = hello.agent_id()->str();
  auto refuse = [&](msg::ErrorCode code, const std::string& detail) {
    ++stats.requestsRejected;
    replyError(source, seq, code, detail);
  };
  if (hello.protocol_version() != bus::kProtocolVersion) {
    refuse(msg::ErrorCode::ProtocolMismatch, "agent speaks protocol " + std::to_string(hello.protocol_version()) +
                                                 ", this coordinator " + std::to_string(bus::kProtocolVersion));
    return;
  }
  if (agentId.empty() || agentId.size() > bus::kMaxAgentIdBytes) {
    refuse(msg::ErrorCode::Malformed, "agent id must be 1 to " + std::to_string(bus::kMaxAgentIdBytes) + " bytes");
    return;
  }
  if (hello.role() != msg::Role::Trainer && hello.role() != msg::Role::Worker) {
    refuse(msg::ErrorCode::NotAllowed, std::string("role ") + msg::EnumNameRole(hello.role()) +
                                           " cannot register (monitors subscribe and ask for snapshots)");
    return;
  }

  auto sendWelcome = [&](const AgentRecord& agent) {
    builder.reset();
    auto& fbb = builder.fbb();
    const auto welcome = msg::CreateWelcome(
        fbb, fbb.CreateString(agent.agentId), agent.slot, agent.rank, workerCount(), block.epoch(),
        committedVersion, static_cast<std::uint32_t>(options.heartbeatInterval.count()),
        static_cast<std::uint32_t>(options.heartbeatTimeout.count()), fbb.CreateString(block.segmentName()));
    sendTo(source, builder.finish(welcome, bus::EnvelopeStamp{block.epoch(), nextSeq()}));
  };

  if (auto existing = agents.find(source); existing != agents.end()) {
    if (existing->second.agentId == agentId && existing->second.role == hello.role()) {
      sendWelcome(existing->second);  // the agent repeated its hello: same answer
      return;
    }
    refuse(msg::ErrorCode::DuplicateAgent, "this connection is registered as '" + existing->second.agentId + "'");
    return;
  }
  const std::uint64_t nowMs = bus::monotonicMillis();
  if (AgentRecord* holder = findById(agentId)) {
    std::string why;
    if (isAlive(*holder, nowMs, why)) {
      refuse(msg::ErrorCode::DuplicateAgent,
             "agent id '" + agentId + "' is held by pid " + std::to_string(holder->process.pid) + " (connection " +
                 holder->routingId + "), which is alive");
      return;
    }
    removeAgent(holder->routingId, msg::AgentEventKind::Replaced, "replaced by a new registration: " + why);
  }
  const auto slot = freeSlot();
  if (!slot) {
    refuse(msg::ErrorCode::BusFull, "all " + std::to_string(bus::kMaxAgents) + " agent slots are taken");
    return;
  }
  std::string rankProblem;
  const auto rank = freeRank(hello.role(), hello.requested_rank(), rankProblem);
  if (!rank) {
    refuse(msg::ErrorCode::NotAllowed, rankProblem);
    return;
  }

  AgentRecord agent;
  agent.routingId = source;
  agent.agentId = agentId;
  agent.role = hello.role();
  agent.rank = *rank;
  agent.slot = *slot;
  agent.sameHost = hello.hostname() != nullptr && hello.hostname()->str() == hostname;
  agent.process.pid = hello.pid();
  if (agent.sameHost) agent.process.startTicks = bus::processStartTicks(static_cast<pid_t>(hello.pid())).value_or(0);
  agent.lastMessageMs = nowMs;
  agent.appliedVersion = hello.applied_version();
  if (hello.channels() != nullptr) {
    for (const auto kind : *hello.channels()) agent.channels.push_back(static_cast<msg::ChannelKind>(kind));
  }
  if (auto assigned = block.assignSlot(agent.slot, bus::SlotAssignment{agentId, agent.role, agent.rank, hello.pid()});
      !assigned) {
    refuse(msg::ErrorCode::Internal, assigned.error().describe());
    return;
  }
  // After a restart the coordinator knows nothing committed; the agents do. Versions only go up, so the highest
  // reported one is the last commit (a worker cannot hold a version that was never committed).
  if (!round && hello.applied_version() > committedVersion) {
    committedVersion = hello.applied_version();
    log::setVersion(committedVersion);
    block.setCommitted(committedVersion, roundCounter);
  }
  const AgentRecord& stored = agents.emplace(source, std::move(agent)).first->second;
  ++stats.agentsJoined;
  sendWelcome(stored);
  // A worker joining while an operator holds generation paused is paused too.
  if (operatorPause && stored.role == msg::Role::Worker) sendOperatorPause(stored.routingId);
  publishAgentEvent(stored, msg::AgentEventKind::Joined, {});
  log::info("{} '{}' joined (rank {}, slot {}, pid {})", msg::EnumNameRole(stored.role), stored.agentId, stored.rank,
            stored.slot, stored.process.pid);
}

void Coordinator::Impl::publishAgentEvent(const AgentRecord& agent, msg::AgentEventKind kind,
                                          const std::string& detail) {
  builder.reset();
  auto& fbb = builder.fbb();
  const auto info = msg::CreateAgentInfo(fbb, fbb.CreateString(agent.agentId), agent.role, agent.slot, agent.rank,
                                         agent.appliedVersion, 0);
  const auto body = msg::CreateAgentEvent(fbb, kind, info, fbb.CreateString(detail));
  std::string topic(bus::topics::kAgent);
  topic += msg::EnumNameAgentEventKind(kind);
  std::transform(topic.begin(), topic.end(), topic.begin(), [](unsigned char c) { return std::tolower(c); });
  (void)events.publish(topic, builder, body, block.epoch());
  block.setEventsPublished(events.published());
}

void Coordinator::Impl::removeAgent(const std::string& routingId, msg::AgentEventKind kind,
                                    const std::string& detail) {
  const auto found = agents.find(routingId);
  if (found == agents.end()) return;
  const AgentRecord agent = found->second;
  agents.erase(found);
  if (kind == msg::AgentEventKind::Dead) ++stats.agentsDied;
  const bool leftForGood = kind == msg::AgentEventKind::Left || kind == msg::AgentEventKind::Evicted;
  (void)block.setOccupancy(agent.slot, leftForGood ? bus::SlotOccupancy::Free
                                                                         : bus::SlotOccupancy::Dead);
  publishAgentEvent(agent, kind, detail);
  // A departure that was not asked for is worth a warning; leaving is routine.
  const auto level = kind == msg::AgentEventKind::Left ? spdlog::level::info : spdlog::level::warn;
  log::logger()->log(level, "{} '{}' {}: {}", msg::EnumNameRole(agent.role), agent.agentId,
      kind == msg::AgentEventKind::Left      ? "left"
      : kind == msg::AgentEventKind::Dead    ? "died"
      : kind == msg::AgentEventKind::Evicted ? "was evicted"
                                             : "was replaced",
      detail);
  agentGone(agent, detail);
}

void Coordinator::Impl::publishBeat() {
  builder.reset();
  const auto body = msg::CreateCoordinatorBeat(builder.fbb(), committedVersion, roundCounter,
                                               round ? round->phase : msg::RoundPhase::Idle,
                                               static_cast<std::uint32_t>(agents.size()), workerCount());
  (void)events.publish(std::string(bus::topics::kBus) + "beat", builder, body, block.epoch());
  block.setEventsPublished(events.published());
}

void Coordinator::Impl::checkLiveness() {
  const std::uint64_t nowMs = bus::monotonicMillis();
  std::vector<std::pair<std::string, std::string>> dead;
  for (const auto& [routingId, agent] : agents) {
    std::string why;
    if (!isAlive(agent, nowMs, why)) dead.emplace_back(routingId, why);
  }
  for (const auto& [routingId, why] : dead) removeAgent(routingId, msg::AgentEventKind::Dead, why);
}

void Coordinator::Impl::handleSnapshotRequest(const std::string& source, const bus::Message& message) {
  builder.reset();
  auto& fbb = builder.fbb();
  std::vector<flatbuffers::Offset<msg::TopicSequence>> sequences;
  for (const auto& [family, seq] : events.sequences()) {
    sequences.push_back(msg::CreateTopicSequence(fbb, fbb.CreateString(family), seq));
  }
  const std::uint64_t nowMs = bus::monotonicMillis();
  std::vector<flatbuffers::Offset<msg::AgentInfo>> infos;
  for (const auto& [routingId, agent] : agents) {
    std::uint64_t lastSign = agent.lastMessageMs;
    msg::AgentState state = msg::AgentState::Unknown;
    std::uint64_t transferRound = 0;
    std::uint64_t transferBytes = 0;
    if (const auto slot = block.agentSlot(agent.slot); slot && slot->agentAttached) {
      lastSign = std::max(lastSign, slot->heartbeatMs);
      // AgentPhase and AgentState share their values (a static_assert in control_block.hpp pins them).
      state = static_cast<msg::AgentState>(slot->phase);
      transferRound = slot->transferRound;
      transferBytes = slot->transferBytes;
    }
    infos.push_back(msg::CreateAgentInfo(fbb, fbb.CreateString(agent.agentId), agent.role, agent.slot, agent.rank,
                                         block.appliedVersion(agent.slot),
                                         static_cast<std::uint32_t>(nowMs > lastSign ? nowMs - lastSign : 0), state,
                                         transferRound, transferBytes));
  }
  const auto pause = block.pauseState();
  const msg::Digest128 digest = round ? bus::toMessage(round->manifestDigest) : msg::Digest128();
  const auto reply = msg::CreateSnapshotReply(
      fbb, fbb.CreateVector(sequences), block.epoch(), committedVersion, fbb.CreateString(committedLabel),
      round ? round->phase : msg::RoundPhase::Idle, round ? round->id : roundCounter, round ? round->version : 0,
      pause.mode, pause.paused, &digest, fbb.CreateVector(infos), round ? round->totalBytes : 0);
  (void)message;
  sendTo(source, builder.finish(reply, bus::EnvelopeStamp{block.epoch(), nextSeq()}));
}

void Coordinator::Impl::shutdown() {
  if (round) abortRound(msg::AbortReason::CoordinatorRestart, "the coordinator is stopping", {});
}

}  // namespace wsync::coordinator
