#include "wsync/bus/session/agent_session.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "wsync/bus/core/clock.hpp"
#include "wsync/bus/core/host_identity.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/region_message.hpp"
#include "wsync/bus/transport/bounded_poll.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::bus {

std::string_view toString(SessionError error) {
  switch (error) {
    case SessionError::InvalidOptions:
      return "invalid session options";
    case SessionError::Transport:
      return "transport failure";
    case SessionError::Refused:
      return "refused by the coordinator";
    case SessionError::Timeout:
      return "no answer from the coordinator";
    case SessionError::ControlBlock:
      return "control block unavailable";
  }
  return "unknown session error";
}

namespace {}  // namespace

std::chrono::milliseconds Registration::roundBound(std::uint64_t payloadBytes) const {
  // A coordinator that sends no phase timeouts (a build before they were in the Welcome) sets no bound here.
  if (pauseTimeout.count() == 0 && transferTimeout.count() == 0) return kNoRoundBound;
  const auto gib = static_cast<std::int64_t>((payloadBytes + (std::uint64_t{1} << 30) - 1) >> 30);
  // Two heartbeat timeouts on top: the coordinator finds a dead peer within one, and its Abort must still arrive.
  return pauseTimeout + transferTimeout + transferTimeoutPerGiB * gib + 2 * heartbeatTimeout;
}

tl::expected<std::unique_ptr<AgentSession>, SessionFailure> AgentSession::open(zmq::context_t& context,
                                                                               SessionOptions options) {
  if (options.agentId.empty() || options.agentId.size() > kMaxAgentIdBytes) {
    return fail(SessionError::InvalidOptions,
                "agent id '" + options.agentId + "' must be 1 to " + std::to_string(kMaxAgentIdBytes) + " bytes");
  }
  auto busName = validateBusName(options.bus);
  if (!busName) return fail(SessionError::InvalidOptions, busName.error().describe());
  auto endpoints = resolveEndpoints(options.bus, options.transport);
  if (!endpoints) return fail(SessionError::InvalidOptions, endpoints.error().describe());
  auto dealer = DealerEndpoint::connect(context, endpoints->requests, options.agentId, options.curve, options.link);
  if (!dealer) return fail(SessionError::Transport, dealer.error().describe());
  const int wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd < 0) return fail(SessionError::Transport, std::string("eventfd: ") + std::strerror(errno));
  return std::unique_ptr<AgentSession>(new AgentSession(context, std::move(options), endpoints->requests,
                                                        endpoints->events, std::move(*dealer), wakeFd));
}

AgentSession::~AgentSession() {
  stopHeartbeatThread();
  ::close(wakeFd_);
}

void AgentSession::wake() {
  const std::uint64_t one = 1;
  // A full counter (2^64 - 2 pending wakes) cannot happen; a failed write would only delay the wake to the
  // next heartbeat.
  (void)::write(wakeFd_, &one, sizeof one);
}

void AgentSession::setAppliedVersion(std::uint64_t version) {
  appliedVersion_.store(version, std::memory_order_release);
  if (slot_) slot_->setAppliedVersion(version);
}

tl::expected<void, SessionFailure> AgentSession::sendBytes(std::span<const std::uint8_t> bytes) {
  auto sent = dealer_.send(bytes);
  if (!sent) return fail(SessionError::Transport, sent.error().describe());
  return {};
}

tl::expected<void, SessionFailure> AgentSession::sendHello() {
  auto& fbb = builder_.fbb();
  builder_.reset();
  const std::vector<std::uint8_t> channels(
      reinterpret_cast<const std::uint8_t*>(options_.channels.data()),
      reinterpret_cast<const std::uint8_t*>(options_.channels.data()) + options_.channels.size());
  const auto channelVector = fbb.CreateVector(channels);
  std::vector<flatbuffers::Offset<msg::ChannelContact>> contacts;
  for (const ChannelContact& contact : options_.channelContacts) {
    contacts.push_back(msg::CreateChannelContact(fbb, contact.kind, fbb.CreateString(contact.address)));
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<msg::ChannelContact>>> contactVector;
  if (!contacts.empty()) contactVector = fbb.CreateVector(contacts);
  const auto bindings =
      options_.bindings != nullptr ? toMessage(fbb, *options_.bindings) : flatbuffers::Offset<msg::Bindings>();
  const auto hello = msg::CreateAgentHello(
      fbb, fbb.CreateString(options_.agentId), options_.role, kProtocolVersion, options_.requestedRank, 1,
      static_cast<std::uint32_t>(getpid()), fbb.CreateString(thisHost().name),
      flatbuffers::Offset<flatbuffers::Vector<msg::ChannelKind>>(channelVector.o), appliedVersion(),
      fbb.CreateString(thisHost().key), contactVector, registration_.secret.toMessage(fbb), bindings);
  helloSeq_ = requestSeq_ + 1;
  awaitingWelcome_ = true;
  refusedDuplicate_ = false;
  refusal_.reset();
  // A hello is sent before the epoch is known: the coordinator ignores the epoch of a hello.
  return send(builder_, hello);
}

tl::expected<bool, SessionFailure> AgentSession::handleRegistrationReply(const Message& message) {
  if (const auto* error = message.as<msg::Error>()) {
    if (error->in_reply_to() == 0) {
      // About no one request: a message of ours the coordinator could not read (it cannot name its seq), or an
      // operator's eviction. Said, since no caller waits on it.
      log::warn("coordinator: {}: {}", msg::EnumNameErrorCode(error->code()),
                error->detail() ? error->detail()->string_view() : std::string_view());
      return true;
    }
    if (error->in_reply_to() < helloSeq_) return true;  // refusing what was queued for a previous coordinator
    if (error->in_reply_to() == helloSeq_ && awaitingWelcome_) {
      const std::string detail = std::string(msg::EnumNameErrorCode(error->code())) + ": " +
                                 (error->detail() ? error->detail()->str() : std::string());
      if (error->code() == msg::ErrorCode::DuplicateAgent) {
        refusedDuplicate_ = true;
        nextHelloRetry_ = std::chrono::steady_clock::now() + kDuplicateRetryInterval;
      } else {
        refusal_ = SessionFailure{SessionError::Refused, detail};
      }
      return true;
    }
    if (error->code() == msg::ErrorCode::UnknownAgent && !awaitingWelcome_) {
      // The coordinator does not know this connection: it restarted, or it dropped us (a command it could not
      // deliver, a heartbeat it missed). The registration is void, as after a lost link: register again.
      stopHeartbeatThread();
      slot_.reset();
      linkLostPending_ = true;
      auto hello = sendHello();
      if (!hello) return tl::unexpected(hello.error());
      nextHelloRetry_ = std::chrono::steady_clock::now() + kHelloRepeatInterval;
      return true;
    }
    return false;  // an error about a round request: the agent's business
  }
  const auto* welcome = message.as<msg::Welcome>();
  if (welcome == nullptr) return false;
  if (!awaitingWelcome_) return true;  // a duplicate answer to an earlier hello
  Registration granted;
  granted.slot = welcome->slot();
  granted.rank = welcome->rank();
  granted.worldSize = welcome->world_size();
  granted.epoch = welcome->epoch();
  granted.committedVersion = welcome->committed_version();
  granted.heartbeatInterval = std::chrono::milliseconds(std::max<std::uint32_t>(welcome->heartbeat_interval_ms(), 1));
  granted.heartbeatTimeout = std::chrono::milliseconds(welcome->heartbeat_timeout_ms());
  granted.committedRound = welcome->committed_round();
  if (welcome->committed_digest() != nullptr) granted.committedDigest = fromMessage(*welcome->committed_digest());
  granted.sourcesTimeout = std::chrono::milliseconds(welcome->sources_timeout_ms());
  if (welcome->committed_receiver_digest() != nullptr) {
    granted.committedReceiverDigest = fromMessage(*welcome->committed_receiver_digest());
  }
  granted.pauseTimeout = std::chrono::milliseconds(welcome->pause_timeout_ms());
  granted.transferTimeout = std::chrono::milliseconds(welcome->transfer_timeout_ms());
  granted.transferTimeoutPerGiB = std::chrono::milliseconds(welcome->transfer_timeout_per_gib_ms());
  granted.operatorPaused = welcome->operator_paused();
  granted.operatorPauseMode = welcome->operator_pause_mode();
  granted.secret = RegistrationSecret::fromMessage(welcome->registration_secret());
  // The coordinator decides "same host" by the same rule from our hello (core/host_identity.hpp).
  const bool remote = welcome->host_key() != nullptr && welcome->host_key()->size() > 0 &&
                      !onThisHost(welcome->host_key()->string_view(), {});
  stopHeartbeatThread();
  if (auto opened = openSlot(granted, remote); !opened) return tl::unexpected(opened.error());
  if (remote_ != remote || registration_.epoch != granted.epoch) {
    log::info("registered with the coordinator on {}{}", welcome->hostname() ? welcome->hostname()->str() : "?",
              remote ? " (another host: its shared memory is out of reach, the bus is mirrored from its beats)"
                     : " (this host)");
  }
  remote_ = remote;
  registration_ = granted;
  awaitingWelcome_ = false;
  startHeartbeatThread();
  nextHeartbeat_ = std::chrono::steady_clock::now() + registration_.heartbeatInterval;
  return true;
}

tl::expected<void, SessionFailure> AgentSession::openSlot(const Registration& granted, bool remote) {
  if (!remote) {
    auto slot = openHostSlot(options_.bus, granted.slot, options_.agentId, appliedVersion(), granted.epoch);
    if (!slot) return fail(SessionError::ControlBlock, slot.error().describe());
    auto view = openHostView(options_.bus);
    if (!view) return fail(SessionError::ControlBlock, view.error().describe());
    slot_ = std::move(*slot);
    view_ = std::move(*view);
    return {};
  }
  if (!mirror_) {
    auto mirror = BusMirror::start(*context_, eventEndpoint_, options_.curve);
    if (!mirror) return fail(SessionError::Transport, "the bus mirror: " + mirror.error().describe());
    mirror_ = std::move(*mirror);
  }
  mirror_->seed(granted.epoch, granted.committedVersion,
                PauseState{granted.operatorPaused, granted.operatorPauseMode, 0});
  RemoteSlotOptions slotOptions{requestEndpoint_,         options_.curve, options_.link,
                                options_.agentId,         granted.slot,   granted.epoch,
                                granted.heartbeatTimeout, granted.secret};
  auto slot = openRemoteSlot(*context_, std::move(slotOptions), appliedVersion(), mirror_);
  if (!slot) return fail(SessionError::Transport, "the slot's report connection: " + slot.error().describe());
  slot_ = std::move(*slot);
  view_ = mirror_;
  return {};
}

tl::expected<Registration, SessionFailure> AgentSession::registerAgent(std::uint64_t appliedVersion) {
  appliedVersion_.store(appliedVersion, std::memory_order_release);
  auto hello = sendHello();
  if (!hello) {
    // A handshake the coordinator refused (a client without CURVE, a key it does not know) leaves no peer to queue
    // the hello for: the refusal is what the operator must read, and its monitor event may trail the send's failure.
    if (auto refused = dealer_.handshakeRefusal(kRefusalNoticeGrace)) return fail(SessionError::Refused, *refused);
    return tl::unexpected(hello.error());
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.registrationTimeout;
  std::string lastRefusal;
  while (awaitingWelcome_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      // A CURVE client holding the wrong server key is dropped by the server without a word: only a hint helps.
      const std::string hint = options_.curve ? " (CURVE: is --server-key the coordinator's public key?)" : "";
      return fail(SessionError::Timeout,
                  lastRefusal.empty()
                      ? "no Welcome within " + std::to_string(options_.registrationTimeout.count()) + " ms" + hint
                      : lastRefusal);
    }
    if (refusedDuplicate_ && now >= nextHelloRetry_) {
      auto again = sendHello();
      if (!again) return tl::unexpected(again.error());
    }
    auto received = dealer_.receive(
        std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), kDuplicateRetryInterval));
    if (!received) return fail(SessionError::Transport, received.error().describe());
    // A refused key is final: say so now rather than after the registration timeout.
    if (auto refused = dealer_.handshakeRefusal()) return fail(SessionError::Refused, *refused);
    if (dealer_.linkLost()) {
      replaceConnection(std::chrono::milliseconds(0));  // says hello again on a new connection
      linkLostPending_ = false;                         // nothing to leave yet: we never were registered
      continue;
    }
    if (!*received || !(*received)->message) continue;  // nothing, or a malformed frame (counted by the socket)
    auto handled = handleRegistrationReply(*(*received)->message);
    if (!handled) return tl::unexpected(handled.error());
    if (refusal_) return tl::unexpected(*refusal_);
    if (refusedDuplicate_) lastRefusal = "agent id '" + options_.agentId + "' is held by a live agent";
  }
  return registration_;
}

void AgentSession::sendHeartbeatIfDue() {
  if (!registered()) {
    // Registering again after a restart or a lost link, or retrying a refused duplicate: repeat the hello now and
    // then.
    const auto now = std::chrono::steady_clock::now();
    if (awaitingWelcome_ && now >= nextHelloRetry_) {
      (void)sendHello();
      nextHelloRetry_ = now + kHelloRepeatInterval;
    }
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < nextHeartbeat_) return;
  nextHeartbeat_ = now + registration_.heartbeatInterval;
  builder_.reset();
  // A full queue (coordinator gone) just drops this beat; the next one follows.
  (void)send(builder_, msg::CreateHeartbeat(builder_.fbb(), appliedVersion()));
}

tl::expected<SessionDelivery, SessionFailure> AgentSession::next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  SessionDelivery delivery;
  while (true) {
    if (!linkLostPending_ && dealer_.linkLost()) {
      log::warn(
          "lost the connection to the coordinator (it exited, dropped this agent, or stopped answering for {} "
          "ms): registering again on a new connection",
          options_.link.timeout.count());
      replaceConnection(std::chrono::milliseconds(0));
    }
    if (eventStreamLost()) {
      // The control connection may look fine (its ZMTP heartbeats flow) while the coordinator's beats stopped
      // reaching us or come from another coordinator: the mirror is then wrong and every transfer's cancel probe
      // takes the coordinator for gone. Only a new registration, with a new subscription, finds it again.
      log::warn(
          "no beat of the coordinator that welcomed us (epoch {:016x}) for over {} ms: registering again, with "
          "a new subscription to its events",
          registration_.epoch, registration_.heartbeatTimeout.count());
      mirror_.reset();
      replaceConnection(std::chrono::milliseconds(0));
    }
    if (std::exchange(linkLostPending_, false)) {
      delivery.linkLost = true;
      return delivery;
    }
    sendHeartbeatIfDue();
    const auto now = std::chrono::steady_clock::now();
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (wait.count() < 0) wait = std::chrono::milliseconds(0);
    if (registered()) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(nextHeartbeat_ - now) +
                                std::chrono::milliseconds(1));
    } else {
      wait = std::min(wait, kDuplicateRetryInterval);
    }
    const bool wasRegistered = registered();
    zmq::pollitem_t items[] = {{dealer_.handle().handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wakeFd_, ZMQ_POLLIN, 0}};
    try {
      // The heartbeat term is negative when this thread was preempted since sendHeartbeatIfDue read the clock:
      // bounded, so that it polls at once instead of forever.
      boundedPoll(items, 2, wait);
    } catch (const zmq::error_t& error) {
      if (error.num() != EINTR) return fail(SessionError::Transport, std::string("poll: ") + error.what());
    }
    if ((items[1].revents & ZMQ_POLLIN) != 0) {
      std::uint64_t count = 0;
      (void)::read(wakeFd_, &count, sizeof count);
      delivery.woken = true;
      return delivery;
    }
    auto received = dealer_.receive(std::chrono::milliseconds(0));
    if (!received) return fail(SessionError::Transport, received.error().describe());
    if (*received && (*received)->message) {
      auto handled = handleRegistrationReply(*(*received)->message);
      if (!handled) return tl::unexpected(handled.error());
      if (!*handled) {
        if (registered() && (*received)->message->epoch() != registration_.epoch) {
          // Not from the coordinator that welcomed us: nothing it says can be about our registration.
          log::warn("dropped a {} of epoch {:016x} (registered under epoch {:016x})",
                    bodyName((*received)->message->type()), (*received)->message->epoch(), registration_.epoch);
          continue;
        }
        delivery.message = std::move(*(*received)->message);
        return delivery;
      }
      if (!wasRegistered && registered()) {
        delivery.reregistered = true;
        return delivery;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return delivery;
  }
}

bool AgentSession::eventStreamLost() const {
  return remote_ && registered() && mirror_ != nullptr &&
         !mirror_->coordinatorAlive(registration_.epoch, registration_.heartbeatTimeout);
}

void AgentSession::goodbye(const std::string& reason) {
  if (!registered()) return;
  // The slot is given up with the registration: no more beats into it (on another host, no more reports the
  // coordinator would have to drop).
  stopHeartbeatThread();
  builder_.reset();
  (void)send(builder_, msg::CreateGoodbye(builder_.fbb(), builder_.fbb().CreateString(reason)));
}

void AgentSession::replaceConnection(std::chrono::milliseconds outage) {
  // The registration went with the connection: stop beating its slot, so that the coordinator lets it expire, and
  // never write the slot again (it may be given to another agent).
  stopHeartbeatThread();
  slot_.reset();
  dealer_.handle().set(zmq::sockopt::linger, 0);  // what was queued for the dead connection is void
  { const DealerEndpoint cut = std::move(dealer_); }
  if (outage.count() > 0) std::this_thread::sleep_for(outage);
  auto dealer = DealerEndpoint::connect(*context_, requestEndpoint_, options_.agentId, options_.curve, options_.link);
  if (!dealer) {
    // Only a bad endpoint fails here, and it connected before: keep trying at the next hello.
    log::error("reconnecting to {} failed: {}", requestEndpoint_, dealer.error().describe());
    return;
  }
  dealer_ = std::move(*dealer);
  linkLostPending_ = true;
  (void)sendHello();
  nextHelloRetry_ = std::chrono::steady_clock::now() + kHelloRepeatInterval;
}

void AgentSession::restartConnection(const std::string& why) {
  log::warn("{}: registering again on a new connection", why);
  replaceConnection(std::chrono::milliseconds(0));
}

void AgentSession::dropConnection(std::chrono::milliseconds outage) {
  log::warn("control connection dropped for {} ms", outage.count());
  replaceConnection(outage);
  log::warn("control connection back as {}", dealer_.routingId());
}

void AgentSession::startHeartbeatThread() {
  beating_.store(true, std::memory_order_release);
  AgentSlot* slot = slot_.get();
  const auto interval = registration_.heartbeatInterval;
  heartbeatThread_ = std::thread([this, slot, interval] {
    while (beating_.load(std::memory_order_acquire)) {
      slot->beat(monotonicMillis());
      // Short sleeps so that stopping is prompt; the beat itself is one store.
      for (auto slept = std::chrono::milliseconds(0); slept < interval && beating_.load(std::memory_order_acquire);
           slept += std::chrono::milliseconds(10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  });
}

void AgentSession::stopHeartbeatThread() {
  beating_.store(false, std::memory_order_release);
  if (heartbeatThread_.joinable()) heartbeatThread_.join();
}

}  // namespace wsync::bus
