// The coordinator's loop, registration, liveness and snapshots. The round itself is in round.cpp.
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
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/core/clock.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/core/text.hpp"

namespace wsync::coordinator {

std::string_view toString(CoordinatorError error) {
  switch (error) {
    case CoordinatorError::InvalidOptions: return "invalid options";
    case CoordinatorError::BusInUse: return "bus in use";
    case CoordinatorError::ControlBlock: return "control block";
    case CoordinatorError::Channel: return "payload channel";
    case CoordinatorError::Transport: return "transport";
  }
  return "unknown coordinator error";
}

namespace {

constexpr int kIoThreads = 2;
constexpr std::uint64_t kRequestIoThreads = 0b01;  // ZMQ_AFFINITY bit masks over the I/O threads
constexpr std::uint64_t kEventIoThreads = 0b10;
// A hostname longer than DNS allows is not one.
constexpr std::size_t kMaxHostnameBytes = 253;
// More channel kinds than the schema has are a list padded to cost us work.
constexpr std::size_t kMaxOfferedChannels = 16;
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
      options.pauseTimeout > kLongestTimeout || options.transferTimeout > kLongestTimeout ||
      options.heartbeatTimeout > kLongestTimeout) {
    return bus::fail(CoordinatorError::InvalidOptions, "the pause, transfer and heartbeat timeouts must be positive "
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
    return bus::fail(inUse ? CoordinatorError::BusInUse : CoordinatorError::ControlBlock,
                     block.error().describe());
  }
  auto channels =
      bus::createChannelOwners(bus::ChannelOwnersConfig{options.bus, options.bucketBytes, options.bufferCount});
  if (!channels) return bus::fail(CoordinatorError::Channel, channels.error().describe());

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
  auto router =
      bus::RouterEndpoint::bind(context, endpoints->requests, kRequestIoThreads, options.curveKeys, options.link);
  if (!router) return bus::fail(CoordinatorError::Transport, router.error().describe());
  auto events = bus::EventPublisher::bind(context, endpoints->events, kEventIoThreads, options.curveKeys);
  if (!events) return bus::fail(CoordinatorError::Transport, events.error().describe());

  auto impl = std::make_unique<Impl>(options, std::move(*block), std::move(*channels), std::move(context),
                                     std::move(*router), std::move(*events));
  impl->authenticator = std::move(authenticator);
  impl->hostname = bus::hostName();
  log::setAgent("coordinator");
  if (const auto& replaced = impl->block.replaced()) {
    // The versions and round numbers go on from where the dead coordinator left them, and so does an operator's
    // pause. Nothing an agent reports changes the committed version: only a commit of this bus does.
    impl->committedVersion = replaced->committedVersion;
    impl->committedRound = replaced->committedRound;
    impl->committedDigest = replaced->committedDigest;
    impl->roundCounter = std::max(replaced->committedRound, replaced->lastRound);
    impl->operatorPause = replaced->operatorPause;
    log::setVersion(impl->committedVersion);
    log::warn("replaced the control block of coordinator pid {}, which died: committed version {}, last round {}{}",
              replaced->creatorPid, replaced->committedVersion, impl->roundCounter,
              replaced->operatorPause ? std::string(", generation paused by an operator (mode ") +
                                            msg::EnumNamePauseMode(*replaced->operatorPause) + ") until wsync-ctl resume"
                                      : std::string());
    if (impl->operatorPause) {
      impl->block.setPauseState(bus::PauseState{true, *impl->operatorPause, 0});
    }
  }
  impl->block.beat(bus::monotonicMillis());
  impl->baselineAllocatedBytes = allocatedBytes();
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
      checkReceiveMemory();
      dropUnreachable();
      logLimiter.flush(now);
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
  const auto code = sent.error().code;
  if (agents.contains(peer) && (code == bus::TransportError::PeerUnreachable || code == bus::TransportError::WouldBlock)) {
    // A registered agent that cannot take a command (gone, or its queue full because it does not read) would wait
    // for that command for good: it is dropped, and registers again.
    if (std::none_of(unreachable.begin(), unreachable.end(), [&](const auto& entry) { return entry.first == peer; })) {
      unreachable.emplace_back(peer, code == bus::TransportError::PeerUnreachable
                                         ? "its connection is gone: a message to it could not be delivered"
                                         : "it does not read its messages: its queue is full");
    }
    return;
  }
  // A client that is not registered loses its answer: routine when it has gone (its old connection's queued
  // requests are answered after it left), worth a warning when it does not read what it asks for; either way a
  // flood of them is a few lines per interval, not one per message.
  const auto level = code == bus::TransportError::PeerUnreachable ? spdlog::level::debug : spdlog::level::warn;
  logLimiter.log(level, "send:" + peer, Clock::now(), [&] {
    return "send to " + bus::printableText(peer) + " failed: " + sent.error().describe();
  });
}

void Coordinator::Impl::dropUnreachable() {
  // removeAgent may abort a round, whose messages may find more agents gone.
  while (!unreachable.empty()) {
    const auto [peer, why] = unreachable.back();
    unreachable.pop_back();
    removeAgent(peer, msg::AgentEventKind::Dead, why);
  }
}

void Coordinator::Impl::rebindRequestEndpoint(std::chrono::milliseconds outage, const std::string& why) {
  // The request endpoint only: the event stream is for monitors, and its sequence numbers must not restart.
  const std::string endpoint = router.endpoint();
  router.handle().set(zmq::sockopt::linger, 0);  // what was queued is lost, as on a cut link
  {
    const bus::RouterEndpoint cut = std::move(router);
  }
  log::warn("request endpoint {} closed{}: {}", endpoint,
            outage.count() > 0 ? " for " + std::to_string(outage.count()) + " ms" : std::string(), why);
  if (outage.count() > 0) std::this_thread::sleep_for(outage);
  auto rebound = bus::RouterEndpoint::bind(context, endpoint, kRequestIoThreads, options.curveKeys, options.link);
  if (!rebound) {
    // Without its endpoint the coordinator is useless: say so and stop (a supervisor restarts it).
    log::error("cannot bind {} again: {}", endpoint, rebound.error().describe());
    std::abort();
  }
  router = std::move(*rebound);
  log::warn("request endpoint {} open again", endpoint);
  // Every agent's connection went with the endpoint, and with it whatever was queued for it: its registration is
  // void. Dropped by dropUnreachable(), once the caller's step of the round is done (a commit in progress finishes
  // first); each registers again on a new connection.
  for (const auto& [routingId, agent] : agents.all()) {
    unreachable.emplace_back(routingId, "its connection went with the request endpoint");
  }
}

void Coordinator::Impl::checkReceiveMemory() {
  const auto now = Clock::now();
  if (options.receiveMemoryBudget == 0 || now < nextMemoryCheck) return;
  const std::uint64_t allocated = allocatedBytes();
  if (allocated <= baselineAllocatedBytes + options.receiveMemoryBudget) return;
  // Only ZeroMQ's receive queues grow without a bound of ours: every structure of the coordinator is capped, so
  // this much memory is messages that clients are still sending (a message of many parts arrives whole or not at
  // all). Resetting the endpoint frees them; every agent notices its link lost and registers again.
  ++stats.endpointResets;
  rebindRequestEndpoint(std::chrono::milliseconds(0),
                        "the coordinator has " + std::to_string(allocated >> 20) + " MiB allocated, " +
                            std::to_string((allocated - baselineAllocatedBytes) >> 20) +
                            " MiB more than at its start and over the receive budget of " +
                            std::to_string(options.receiveMemoryBudget >> 20) +
                            " MiB: a client is sending more than the bus takes (a message of many parts?)");
  malloc_trim(0);
  nextMemoryCheck = Clock::now() + kMemoryResetCooldown;
}

void Coordinator::Impl::replyError(const std::string& peer, std::uint64_t inReplyTo, msg::ErrorCode code,
                                   const std::string& detail) {
  builder.reset();
  auto& fbb = builder.fbb();
  const auto body = msg::CreateError(fbb, code, fbb.CreateString(detail), inReplyTo, committedVersion);
  sendTo(peer, stamp(body));
}

void Coordinator::Impl::handle(const std::string& source, const bus::Message& message) {
  // Requests that need no registration. A hello may carry any epoch (it is how a client learns the current one); a
  // control request meant for an earlier coordinator of this bus must not steer this one.
  switch (message.type()) {
    case msg::Body::AgentHello: handleHello(source, message, *message.as<msg::AgentHello>()); return;
    case msg::Body::SnapshotRequest: handleSnapshotRequest(source, message); return;
    case msg::Body::VersionQuery: handleVersionQuery(source, message, *message.as<msg::VersionQuery>()); return;
    case msg::Body::ControlRequest:
      if (message.epoch() != 0 && message.epoch() != block.epoch()) {
        ++stats.requestsRejected;
        replyError(source, message.seq(), msg::ErrorCode::StaleEpoch,
                   "a control request for the coordinator of epoch " + bus::hex64(message.epoch()) +
                       "; this one's is " + bus::hex64(block.epoch()) + " (send epoch 0 to mean any)");
        return;
      }
      handleControl(source, message, *message.as<msg::ControlRequest>());
      return;
    default: break;
  }
  AgentRecord* const found = agents.find(source);
  if (found == nullptr) {
    ++stats.requestsRejected;
    replyError(source, message.seq(), msg::ErrorCode::UnknownAgent,
               std::string(bus::bodyName(message.type())) + " from a connection that has not registered: send "
               "AgentHello first");
    return;
  }
  AgentRecord& agent = *found;
  if (message.epoch() != block.epoch()) {
    // A registered agent stamps the epoch its Welcome gave: anything else is not about this registration.
    ++stats.requestsRejected;
    replyError(source, message.seq(), msg::ErrorCode::StaleEpoch,
               std::string(bus::bodyName(message.type())) + " of epoch " + bus::hex64(message.epoch()) + " from '" +
                   agent.agentId + "', registered under epoch " + bus::hex64(block.epoch()));
    return;
  }
  agent.lastMessageMs = bus::monotonicMillis();
  switch (message.type()) {
    // The agent's own claim about what it serves, shown as such; it changes no state of the bus.
    case msg::Body::Heartbeat: agent.appliedVersion = message.as<msg::Heartbeat>()->applied_version(); return;
    case msg::Body::BeginUpdate: handleBegin(source, message, *message.as<msg::BeginUpdate>()); return;
    case msg::Body::PauseAck: handlePauseAck(agent, *message.as<msg::PauseAck>()); return;
    case msg::Body::UpdateDone: handleUpdateDone(agent, *message.as<msg::UpdateDone>()); return;
    case msg::Body::Abort: handleTrainerAbort(agent, *message.as<msg::Abort>()); return;
    case msg::Body::Goodbye: {
      const auto* goodbye = message.as<msg::Goodbye>();
      removeAgent(source, msg::AgentEventKind::Left,
                  goodbye->reason() ? bus::printableText(goodbye->reason()->string_view()) : std::string("goodbye"));
      return;
    }
    default:
      ++stats.requestsRejected;
      replyError(source, message.seq(), msg::ErrorCode::NotAllowed,
                 std::string("the coordinator does not take ") + bus::bodyName(message.type()) + " from agents");
      return;
  }
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

std::string Coordinator::Impl::helloProblem(const msg::AgentHello& hello) const {
  if (auto problem = bus::checkAgentId(hello.agent_id()->string_view()); !problem.empty()) return problem;
  if (hello.pid() == 0) return "pid 0 is not a process";
  const std::int32_t rank = hello.requested_rank();
  if (rank < -1 || rank >= static_cast<std::int32_t>(bus::kMaxAgents)) {
    return "requested rank " + std::to_string(rank) + " is outside -1 (any) to " + std::to_string(bus::kMaxAgents - 1);
  }
  if (hello.hostname() != nullptr && hello.hostname()->size() > kMaxHostnameBytes) {
    return "a hostname of " + std::to_string(hello.hostname()->size()) + " bytes (at most " +
           std::to_string(kMaxHostnameBytes) + ")";
  }
  if (hello.channels() != nullptr && hello.channels()->size() > kMaxOfferedChannels) {
    return std::to_string(hello.channels()->size()) + " channels offered (at most " +
           std::to_string(kMaxOfferedChannels) + ")";
  }
  return {};
}

std::string Coordinator::Impl::admissionProblem(const msg::AgentHello& hello) const {
  if (hello.role() != msg::Role::Worker || hello.channels() == nullptr) return {};
  // Every registered worker takes part in every round, and a round needs all of them on its channel: one worker more
  // than a channel takes would make every round on that channel fail. Refused here, naming the limit, instead.
  for (const auto offered : *hello.channels()) {
    const auto kind = static_cast<msg::ChannelKind>(offered);
    const bus::ChannelOwner* owner = ownerOf(kind);
    if (owner == nullptr || owner->maxReceivers() == 0) continue;  // no round can run on it here anyway
    const std::uint32_t capacity = owner->maxReceivers();
    const std::uint32_t offering = agents.workersOffering(kind);
    if (static_cast<std::uint64_t>(offering) + 1 > capacity) {
      return "a round on the " + bus::channelName(kind) + " channel takes at most " +
             std::to_string(capacity) + " workers, and " + std::to_string(offering) +
             " workers offering it are registered";
    }
  }
  return {};
}

void Coordinator::Impl::handleHello(const std::string& source, const bus::Message& message,
                                    const msg::AgentHello& hello) {
  const std::uint64_t seq = message.seq();
  auto refuse = [&](msg::ErrorCode code, const std::string& detail) {
    ++stats.requestsRejected;
    replyError(source, seq, code, detail);
  };
  if (hello.protocol_version() != bus::kProtocolVersion) {
    refuse(msg::ErrorCode::ProtocolMismatch, "agent speaks protocol " + std::to_string(hello.protocol_version()) +
                                                 ", this coordinator " + std::to_string(bus::kProtocolVersion));
    return;
  }
  if (const std::string problem = helloProblem(hello); !problem.empty()) {
    refuse(msg::ErrorCode::InvalidField, problem);
    return;
  }
  const std::string agentId = hello.agent_id()->str();
  if (hello.role() != msg::Role::Trainer && hello.role() != msg::Role::Worker) {
    refuse(msg::ErrorCode::NotAllowed, std::string("role ") + msg::EnumNameRole(hello.role()) +
                                           " cannot register (monitors subscribe and ask for snapshots)");
    return;
  }

  auto sendWelcome = [&](const AgentRecord& agent) {
    builder.reset();
    auto& fbb = builder.fbb();
    const msg::Digest128 digest = bus::toMessage(committedDigest);
    const auto welcome = msg::CreateWelcome(
        fbb, fbb.CreateString(agent.agentId), agent.slot, agent.rank, agents.workerCount(), block.epoch(),
        committedVersion, static_cast<std::uint32_t>(options.heartbeatInterval.count()),
        static_cast<std::uint32_t>(options.heartbeatTimeout.count()), fbb.CreateString(block.segmentName()),
        committedRound, &digest, static_cast<std::uint32_t>(options.pauseTimeout.count()),
        static_cast<std::uint32_t>(options.transferTimeout.count()),
        static_cast<std::uint32_t>(kTransferTimeoutPerGiB.count()), operatorPause.has_value(),
        operatorPause.value_or(msg::PauseMode::Keep));
    sendTo(source, stamp(welcome));
  };

  if (const AgentRecord* existing = agents.find(source)) {
    if (existing->agentId == agentId && existing->role == hello.role()) {
      sendWelcome(*existing);  // the agent repeated its hello: same answer
      return;
    }
    refuse(msg::ErrorCode::DuplicateAgent, "this connection is registered as '" + existing->agentId + "'");
    return;
  }
  const std::uint64_t nowMs = bus::monotonicMillis();
  const bool sameHost = hello.hostname() != nullptr && hello.hostname()->string_view() == hostname;
  const std::uint64_t startTicks =
      sameHost ? bus::processStartTicks(static_cast<pid_t>(hello.pid())).value_or(0) : std::uint64_t{0};
  if (AgentRecord* holder = agents.findById(agentId)) {
    std::string why;
    // The same process (this host, same pid and start time) registering on a new connection lost the old one: its
    // old registration is void, and waiting for its heartbeat to expire would only delay its return.
    const bool sameProcess = sameHost && holder->sameHost && startTicks != 0 &&
                             holder->process.pid == hello.pid() && holder->process.startTicks == startTicks;
    if (sameProcess) {
      why = "its process (pid " + std::to_string(hello.pid()) + ") registered again on a new connection";
    } else if (isAlive(*holder, nowMs, why)) {
      refuse(msg::ErrorCode::DuplicateAgent,
             "agent id '" + agentId + "' is held by pid " + std::to_string(holder->process.pid) + ", which is alive");
      return;
    }
    removeAgent(holder->routingId, msg::AgentEventKind::Replaced, "replaced by a new registration: " + why);
  }
  if (const std::string problem = admissionProblem(hello); !problem.empty()) {
    refuse(msg::ErrorCode::BusFull, problem);
    return;
  }
  const auto slot = freeSlot();
  if (!slot) {
    refuse(msg::ErrorCode::BusFull, "all " + std::to_string(bus::kMaxAgents) + " agent slots are taken");
    return;
  }
  std::string rankProblem;
  const auto rank = agents.freeRank(hello.role(), hello.requested_rank(), rankProblem);
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
  agent.sameHost = sameHost;
  agent.process.pid = hello.pid();
  agent.process.startTicks = startTicks;
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
  // What an agent reports is its claim about itself, never bus state: the committed version changes only when this
  // bus commits (or carries on a dead coordinator's block). A worker above it holds bytes this bus never verified.
  if (agent.role == msg::Role::Worker && hello.applied_version() > committedVersion) {
    logLimiter.warn("claim:" + agentId, Clock::now(), [&] {
      return "worker '" + agentId + "' reports version " + std::to_string(hello.applied_version()) +
             ", above the committed version " + std::to_string(committedVersion) +
             ": not a version this bus committed (a lost control block, or a client that lies); it counts for nothing";
    });
  }
  const AgentRecord& stored = agents.add(std::move(agent));
  ++stats.agentsJoined;
  sendWelcome(stored);
  // A worker joining while an operator holds generation paused is paused too.
  if (operatorPause && stored.role == msg::Role::Worker) sendOperatorPause(stored.routingId);
  publishAgentEvent(stored, msg::AgentEventKind::Joined, {});
  // Through the limiter, as departures are: a client registering in a loop is a few lines per interval.
  logLimiter.info("agent:" + stored.agentId, Clock::now(), [&] {
    return std::string(msg::EnumNameRole(stored.role)) + " '" + stored.agentId + "' joined (rank " +
           std::to_string(stored.rank) + ", slot " + std::to_string(stored.slot) + ", pid " +
           std::to_string(stored.process.pid) + ")";
  });
}

void Coordinator::Impl::publishAgentEvent(const AgentRecord& agent, msg::AgentEventKind kind,
                                          const std::string& detail) {
  builder.reset();
  auto& fbb = builder.fbb();
  const auto info = msg::CreateAgentInfo(fbb, fbb.CreateString(agent.agentId), agent.role, agent.slot, agent.rank,
                                         agent.appliedVersion, 0);
  const auto body = msg::CreateAgentEvent(fbb, kind, info, fbb.CreateString(detail));
  publish(bus::topics::topicOf(bus::topics::kAgent, msg::EnumNameAgentEventKind(kind)), body);
}

void Coordinator::Impl::removeAgent(const std::string& routingId, msg::AgentEventKind kind,
                                    const std::string& detail) {
  const auto removed = agents.remove(routingId);
  if (!removed) return;
  const AgentRecord& agent = *removed;
  if (kind == msg::AgentEventKind::Dead) ++stats.agentsDied;
  const bool leftForGood = kind == msg::AgentEventKind::Left || kind == msg::AgentEventKind::Evicted;
  (void)block.setOccupancy(agent.slot, leftForGood ? bus::SlotOccupancy::Free
                                                                         : bus::SlotOccupancy::Dead);
  publishAgentEvent(agent, kind, detail);
  // A departure that was not asked for is worth a warning; leaving is routine.
  const auto level = kind == msg::AgentEventKind::Left ? spdlog::level::info : spdlog::level::warn;
  logLimiter.log(level, "agent:" + agent.agentId, Clock::now(), [&] {
    const char* what = kind == msg::AgentEventKind::Left      ? "left"
                       : kind == msg::AgentEventKind::Dead    ? "died"
                       : kind == msg::AgentEventKind::Evicted ? "was evicted"
                                                              : "was replaced";
    return std::string(msg::EnumNameRole(agent.role)) + " '" + agent.agentId + "' " + what + ": " + detail;
  });
  agentGone(agent, detail);
}

void Coordinator::Impl::publishBeat() {
  builder.reset();
  const auto body = msg::CreateCoordinatorBeat(builder.fbb(), committedVersion, roundCounter,
                                               round ? round->phase : msg::RoundPhase::Idle,
                                               agents.size(), agents.workerCount());
  publish(std::string(bus::topics::kBus) + "beat", body);
}

void Coordinator::Impl::checkLiveness() {
  const std::uint64_t nowMs = bus::monotonicMillis();
  std::vector<std::pair<std::string, std::string>> dead;
  for (const auto& [routingId, agent] : agents.all()) {
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
  for (const auto& [routingId, agent] : agents.all()) {
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
      pause.mode, pause.paused, &digest, fbb.CreateVector(infos), round ? round->totalBytes : 0,
      operatorPause.has_value(), operatorPause.value_or(msg::PauseMode::Keep));
  (void)message;
  sendTo(source, stamp(reply));
}

void Coordinator::Impl::handleVersionQuery(const std::string& source, const bus::Message& message,
                                           const msg::VersionQuery& query) {
  const std::uint64_t version = query.version();
  if (version == 0) {
    ++stats.requestsRejected;
    replyError(source, message.seq(), msg::ErrorCode::InvalidField, "version 0 is never published");
    return;
  }
  msg::VersionFate fate = msg::VersionFate::Unknown;
  std::uint64_t roundId = 0;
  msg::AbortReason reason = msg::AbortReason::None;
  std::string detail;
  const auto record = std::find_if(history.rbegin(), history.rend(),
                                   [&](const RoundRecord& entry) { return entry.version == version; });
  if (round && round->version == version) {
    fate = msg::VersionFate::InProgress;
    roundId = round->id;
    detail = std::string("round ") + std::to_string(round->id) + " is in phase " + msg::EnumNameRoundPhase(round->phase);
  } else if (record != history.rend()) {
    fate = record->committed ? msg::VersionFate::Committed : msg::VersionFate::Aborted;
    roundId = record->round;
    reason = record->reason;
    detail = record->detail;
  } else if (version == committedVersion) {
    fate = msg::VersionFate::Committed;
    roundId = committedRound;
    detail = "it is the committed version";
  } else if (version > committedVersion) {
    fate = msg::VersionFate::NotCommitted;
    reason = msg::AbortReason::Lost;
    detail = "no round of version " + std::to_string(version) +
             " is known here (its BeginUpdate never arrived, or the coordinator that ran it died) and the committed "
             "version is " + std::to_string(committedVersion);
  } else {
    fate = msg::VersionFate::Superseded;
    detail = "version " + std::to_string(committedVersion) + " is committed, and no record of version " +
             std::to_string(version) + " is left";
  }
  builder.reset();
  auto& fbb = builder.fbb();
  const auto report = msg::CreateVersionReport(fbb, version, fate, roundId, reason, fbb.CreateString(detail),
                                               committedVersion);
  sendTo(source, builder.finish(report, bus::EnvelopeStamp{block.epoch(), message.seq()}));
}

void Coordinator::Impl::shutdown() {
  if (round) abortRound(msg::AbortReason::CoordinatorRestart, "the coordinator is stopping", {});
}

}  // namespace wsync::coordinator
