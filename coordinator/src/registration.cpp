// Registration and liveness: who may join (a hello's fields, the bus's and the channels' capacity, a live holder of
// the same agent id), the slot and rank a newcomer gets, and the departure of agents that left, died or were
// evicted, which ends a round they take part in.
#include <algorithm>
#include <string>

#include "coordinator_impl.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/core/clock.hpp"
#include "wsync/bus/core/host_identity.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/region_message.hpp"
#include "wsync/bus/protocol/topics.hpp"

namespace wsync::coordinator {

namespace {

// A hostname longer than DNS allows is not one.
constexpr std::size_t kMaxHostnameBytes = 253;
// A host key (core/host_identity.hpp) is a boot id and a few numbers: anything much longer is not one.
constexpr std::size_t kMaxHostKeyBytes = 256;
// More channel kinds than the schema has are a list padded to cost us work.
constexpr std::size_t kMaxOfferedChannels = 16;

}  // namespace

std::optional<std::uint32_t> Coordinator::Impl::freeSlot() {
  if (auto slot = block_.findFreeSlot()) return slot;
  // Slots of dead agents stay visible to monitors until they are needed.
  for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
    const auto snapshot = block_.agentSlot(slot);
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
  if (const auto slot = block_.agentSlot(agent.slot); slot && slot->agentAttached) {
    lastSign = std::max(lastSign, slot->heartbeatMs);
  }
  const auto timeoutMs = static_cast<std::uint64_t>(options_.heartbeatTimeout.count());
  if (nowMs > lastSign + timeoutMs) {
    why = "no heartbeat for " + std::to_string(nowMs - lastSign) + " ms (timeout " + std::to_string(timeoutMs) + " ms)";
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
  if (hello.host_key() != nullptr && hello.host_key()->size() > kMaxHostKeyBytes) {
    return "a host key of " + std::to_string(hello.host_key()->size()) + " bytes (at most " +
           std::to_string(kMaxHostKeyBytes) + ")";
  }
  if (hello.channels() != nullptr && hello.channels()->size() > kMaxOfferedChannels) {
    return std::to_string(hello.channels()->size()) + " channels offered (at most " +
           std::to_string(kMaxOfferedChannels) + ")";
  }
  if (const auto* contacts = hello.channel_contacts(); contacts != nullptr) {
    if (contacts->size() > kMaxOfferedChannels) {
      return std::to_string(contacts->size()) + " channel contacts (at most " + std::to_string(kMaxOfferedChannels) +
             ")";
    }
    for (const msg::ChannelContact* contact : *contacts) {
      const std::string_view address = contact->address() ? contact->address()->string_view() : std::string_view();
      // Handed to every receiver of its rounds and named in logs: bounded, printable, no control bytes.
      if (auto problem = bus::checkClientText("a channel contact", address, bus::kMaxContactAddressBytes);
          !problem.empty()) {
        return problem;
      }
    }
  }
  return {};
}

std::string Coordinator::Impl::admissionProblem(const msg::AgentHello& hello) const {
  if (hello.role() != msg::Role::Worker || hello.channels() == nullptr) return {};
  // Every registered worker takes part in every round, and a round needs all of them on its channel: one worker more
  // than a channel takes would make every round on that channel fail. Refused here, naming the limit, instead.
  for (const auto offered : *hello.channels()) {
    const auto kind = static_cast<msg::ChannelKind>(offered);
    const bus::ChannelOwner* owner = rounds_.ownerOf(kind);
    if (owner == nullptr || owner->maxReceivers() == 0) continue;  // no round can run on it here anyway
    const std::uint32_t capacity = owner->maxReceivers();
    const std::uint32_t offering = agents_.workersOffering(kind);
    if (static_cast<std::uint64_t>(offering) + 1 > capacity) {
      return "a round on the " + bus::channelName(kind) + " channel takes at most " + std::to_string(capacity) +
             " workers, and " + std::to_string(offering) + " workers offering it are registered";
    }
  }
  return {};
}

bool Coordinator::Impl::mayReplace(const AgentRecord& holder, const std::string& peerKey, const msg::AgentHello& hello,
                                   std::uint64_t nowMs, std::string& why) const {
  // The holder's own proof: its secret went to its connection alone, and on CURVE its key is one no other client
  // can present. An agent whose link broke registers again with it and is back at once.
  if (holder.secret.matches(bus::RegistrationSecret::fromMessage(hello.registration_secret())) &&
      holder.peerKey == peerKey) {
    why = "it registered again on a new connection (with its registration's secret)";
    return true;
  }
  // Anyone else waits until the holder is gone: its process gone (this host) or its heartbeat expired.
  return !isAlive(holder, nowMs, why);
}

void Coordinator::Impl::handleHello(const std::string& source, const std::string& peerKey, const bus::Message& message,
                                    const msg::AgentHello& hello) {
  const std::uint64_t seq = message.seq();
  if (hello.protocol_version() != bus::kProtocolVersion) {
    refuse(source, seq, msg::ErrorCode::ProtocolMismatch,
           "agent speaks protocol " + std::to_string(hello.protocol_version()) + ", this coordinator " +
               std::to_string(bus::kProtocolVersion));
    return;
  }
  if (const std::string problem = helloProblem(hello); !problem.empty()) {
    refuse(source, seq, msg::ErrorCode::InvalidField, problem);
    return;
  }
  const std::string agentId = hello.agent_id()->str();
  if (hello.role() != msg::Role::Trainer && hello.role() != msg::Role::Worker) {
    refuse(source, seq, msg::ErrorCode::NotAllowed,
           std::string("role ") + msg::EnumNameRole(hello.role()) +
               " cannot register (monitors subscribe and ask for snapshots)");
    return;
  }

  auto sendWelcome = [&](const AgentRecord& agent) {
    const CommittedVersion& committed = rounds_.committed();
    const auto& operatorPause = pause_.operatorPause();
    auto& fbb = outbox_.start();
    const msg::Digest128 digest = bus::toMessage(committed.digest);
    // A worker of the last region round that lost its Commit learns its digest here, and applies what it staged.
    const auto receiver = committed.receiverDigests.find(agent.agentId);
    const msg::Digest128 receiverDigest =
        bus::toMessage(receiver != committed.receiverDigests.end() ? receiver->second : bus::Digest{});
    const auto welcome = msg::CreateWelcome(
        fbb, fbb.CreateString(agent.agentId), agent.slot, agent.rank, agents_.workerCount(), block_.epoch(),
        committed.version, static_cast<std::uint32_t>(options_.heartbeatInterval.count()),
        static_cast<std::uint32_t>(options_.heartbeatTimeout.count()), fbb.CreateString(block_.segmentName()),
        committed.round, &digest, static_cast<std::uint32_t>(options_.pauseTimeout.count()),
        static_cast<std::uint32_t>(options_.transferTimeout.count()),
        static_cast<std::uint32_t>(kTransferTimeoutPerGiB.count()), operatorPause.has_value(),
        operatorPause.value_or(msg::PauseMode::Keep), fbb.CreateString(bus::thisHost().key),
        fbb.CreateString(hostname_), agent.secret.toMessage(fbb), &receiverDigest,
        static_cast<std::uint32_t>(options_.sourcesTimeout.count()));
    outbox_.send(source, welcome);
  };

  if (const AgentRecord* existing = agents_.find(source)) {
    if (existing->agentId == agentId && existing->role == hello.role()) {
      sendWelcome(*existing);  // the agent repeated its hello: same answer
      return;
    }
    refuse(source, seq, msg::ErrorCode::DuplicateAgent, "this connection is registered as '" + existing->agentId + "'");
    return;
  }
  const std::uint64_t nowMs = bus::monotonicMillis();
  const std::string_view hostname = hello.hostname() ? hello.hostname()->string_view() : std::string_view();
  const bool sameHost =
      bus::onThisHost(hello.host_key() ? hello.host_key()->string_view() : std::string_view(), hostname);
  const std::uint64_t startTicks =
      sameHost ? bus::processStartTicks(static_cast<pid_t>(hello.pid())).value_or(0) : std::uint64_t{0};
  if (AgentRecord* holder = agents_.findById(agentId)) {
    std::string why;
    if (!mayReplace(*holder, peerKey, hello, nowMs, why)) {
      // Nothing about the holder in the answer (its pid, its host): a refusal must not teach a client what to quote.
      refuse(source, seq, msg::ErrorCode::DuplicateAgent,
             "agent id '" + agentId +
                 "' is held by a live registration on another connection: it can be taken "
                 "once its holder leaves, dies or misses heartbeats for " +
                 std::to_string(options_.heartbeatTimeout.count()) + " ms");
      return;
    }
    removeAgent(holder->routingId, msg::AgentEventKind::Replaced, "replaced by a new registration: " + why);
  }
  if (const std::string problem = admissionProblem(hello); !problem.empty()) {
    refuse(source, seq, msg::ErrorCode::BusFull, problem);
    return;
  }
  const auto slot = freeSlot();
  if (!slot) {
    refuse(source, seq, msg::ErrorCode::BusFull, "all " + std::to_string(bus::kMaxAgents) + " agent slots are taken");
    return;
  }
  auto secret = bus::RegistrationSecret::generate();
  if (!secret) {
    refuse(source, seq, msg::ErrorCode::Internal, secret.error());
    return;
  }
  std::shared_ptr<const bus::ReceiverBindings> bindings;
  if (hello.bindings() != nullptr) {
    if (hello.role() != msg::Role::Worker) {
      refuse(source, seq, msg::ErrorCode::NotAllowed, "only a worker binds regions (a trainer declares holdings)");
      return;
    }
    auto decoded = bus::bindingsFromMessage(*hello.bindings());
    if (!decoded) {
      refuse(source, seq, msg::ErrorCode::InvalidField, "bindings: " + decoded.error().describe());
      return;
    }
    bindings = std::make_shared<const bus::ReceiverBindings>(std::move(*decoded));
  }
  std::string rankProblem;
  const auto rank = agents_.freeRank(hello.role(), hello.requested_rank(), rankProblem);
  if (!rank) {
    refuse(source, seq, msg::ErrorCode::NotAllowed, rankProblem);
    return;
  }

  AgentRecord agent;
  agent.routingId = source;
  agent.agentId = agentId;
  agent.role = hello.role();
  agent.rank = *rank;
  agent.slot = *slot;
  agent.sameHost = sameHost;
  agent.hostname = bus::printableText(hostname);
  agent.process.pid = hello.pid();
  agent.process.startTicks = startTicks;
  agent.lastMessageMs = nowMs;
  agent.appliedVersion = hello.applied_version();
  agent.secret = *secret;
  agent.peerKey = peerKey;
  if (bindings != nullptr) {
    agent.bindingsDigest = bus::digestOf(*bindings);
    agent.knownDeclarations.push_back(agent.bindingsDigest);  // its own: never sent back to it
    agent.bindings = std::move(bindings);
  }
  if (hello.channels() != nullptr) {
    for (const auto kind : *hello.channels()) agent.channels.push_back(static_cast<msg::ChannelKind>(kind));
  }
  if (const auto* contacts = hello.channel_contacts(); contacts != nullptr) {
    for (const msg::ChannelContact* contact : *contacts) {
      agent.contacts.push_back(
          bus::ChannelContact{contact->kind(), contact->address() ? contact->address()->str() : std::string()});
    }
  }
  if (auto assigned = block_.assignSlot(agent.slot, bus::SlotAssignment{agentId, agent.role, agent.rank, hello.pid()});
      !assigned) {
    refuse(source, seq, msg::ErrorCode::Internal, assigned.error().describe());
    return;
  }
  // What an agent reports is its claim about itself, never bus state: the committed version changes only when this
  // bus commits (or carries on a dead coordinator's block_). A worker above it holds bytes this bus never verified.
  if (agent.role == msg::Role::Worker && hello.applied_version() > rounds_.committed().version) {
    logLimiter_.warn("claim:" + agentId, Clock::now(), [&] {
      return "worker '" + agentId + "' reports version " + std::to_string(hello.applied_version()) +
             ", above the committed version " + std::to_string(rounds_.committed().version) +
             ": not a version this bus committed (a lost control block, or a client that lies); it counts for nothing";
    });
  }
  if (!sameHost) {
    // It cannot map the block: its half of the slot is written here, from its hello now and its SlotReports later.
    (void)block_.writeRemoteAgent(agent.slot,
                                  bus::RemoteAgentState{hello.applied_version(), nowMs, bus::AgentPhase::Idle, 0, 0});
  }
  const AgentRecord& stored = agents_.add(std::move(agent));
  ++stats_.agentsJoined;
  sendWelcome(stored);
  // A worker joining while an operator holds generation paused is paused too.
  if (pause_.operatorPause() && stored.role == msg::Role::Worker) sendOperatorPause(stored.routingId);
  publishAgentEvent(stored, msg::AgentEventKind::Joined, {});
  // Through the limiter, as departures are: a client registering in a loop is a few lines per interval.
  logLimiter_.info("agent:" + stored.agentId, Clock::now(), [&] {
    return std::string(msg::EnumNameRole(stored.role)) + " '" + stored.agentId + "' joined (rank " +
           std::to_string(stored.rank) + ", slot " + std::to_string(stored.slot) + ", pid " +
           std::to_string(stored.process.pid) +
           (stored.sameHost ? "" : ", on another host: '" + stored.hostname + "'") + ")";
  });
}

void Coordinator::Impl::publishAgentEvent(const AgentRecord& agent, msg::AgentEventKind kind,
                                          const std::string& detail) {
  auto& fbb = outbox_.start();
  const auto info = msg::CreateAgentInfo(fbb, fbb.CreateString(agent.agentId), agent.role, agent.slot, agent.rank,
                                         agent.appliedVersion, 0);
  const auto body = msg::CreateAgentEvent(fbb, kind, info, fbb.CreateString(detail));
  outbox_.publish(bus::topics::topicOf(bus::topics::kAgent, msg::EnumNameAgentEventKind(kind)), body);
}

void Coordinator::Impl::removeAgent(const std::string& routingId, msg::AgentEventKind kind, const std::string& detail) {
  const auto removed = agents_.remove(routingId);
  if (!removed) return;
  const AgentRecord& agent = *removed;
  if (kind == msg::AgentEventKind::Dead) ++stats_.agentsDied;
  const bool leftForGood = kind == msg::AgentEventKind::Left || kind == msg::AgentEventKind::Evicted;
  (void)block_.setOccupancy(agent.slot, leftForGood ? bus::SlotOccupancy::Free : bus::SlotOccupancy::Dead);
  publishAgentEvent(agent, kind, detail);
  // A departure that was not asked for is worth a warning; leaving is routine.
  const auto level = kind == msg::AgentEventKind::Left ? spdlog::level::info : spdlog::level::warn;
  logLimiter_.log(level, "agent:" + agent.agentId, Clock::now(), [&] {
    const char* what = kind == msg::AgentEventKind::Left      ? "left"
                       : kind == msg::AgentEventKind::Dead    ? "died"
                       : kind == msg::AgentEventKind::Evicted ? "was evicted"
                                                              : "was replaced";
    return std::string(msg::EnumNameRole(agent.role)) + " '" + agent.agentId + "' " + what + ": " + detail;
  });
  rounds_.agentGone(agent, detail);
}

void Coordinator::Impl::checkLiveness() {
  const std::uint64_t nowMs = bus::monotonicMillis();
  std::vector<std::pair<std::string, std::string>> dead;
  for (const auto& [routingId, agent] : agents_.all()) {
    std::string why;
    if (!isAlive(agent, nowMs, why)) dead.emplace_back(routingId, why);
  }
  for (const auto& [routingId, why] : dead) removeAgent(routingId, msg::AgentEventKind::Dead, why);
}

}  // namespace wsync::coordinator
