#pragma once
// What trainer and worker agents share: the connection to the coordinator, registration, heartbeats and
// re-registration after a coordinator restart (docs/update-round.md, "Registration").
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/channel/channel_contact.hpp"
#include "wsync/bus/core/failure.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/region.hpp"
#include "wsync/bus/protocol/registration_secret.hpp"
#include "wsync/bus/session/agent_slot.hpp"
#include "wsync/bus/session/bus_mirror.hpp"
#include "wsync/bus/session/bus_view.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"
#include "wsync/bus/transport/socket_options.hpp"

namespace wsync::bus {

enum class SessionError : std::uint8_t {
  InvalidOptions,  // bad agent id, bus name or endpoint
  Transport,       // a socket failed (see detail)
  Refused,         // the coordinator refused the registration (detail: its error code and reason)
  Timeout,         // no Welcome in time
  ControlBlock,    // the coordinator's shared-memory block could not be attached
};

std::string_view toString(SessionError error);
using SessionFailure = Failure<SessionError>;

// How long an agent waits for its first Welcome: long enough for a coordinator that is still starting.
inline constexpr std::chrono::milliseconds kRegistrationTimeout{30'000};
// A refused duplicate id is retried at this pace: the coordinator replaces the old registration as soon as it
// sees the old process gone or its heartbeat expire.
inline constexpr std::chrono::milliseconds kDuplicateRetryInterval{250};
// While registering again (after a lost link or an unknown-agent refusal), the hello is repeated this often: a
// coordinator frozen or restarting answers the first one it reads.
inline constexpr std::chrono::milliseconds kHelloRepeatInterval{1000};
// How long a hello that could not be queued waits for the socket monitor to say the handshake was refused: ZeroMQ
// drops the refused connection's queue as it reports the refusal, so the send can fail first.
inline constexpr std::chrono::milliseconds kRefusalNoticeGrace{1000};
// Registration::roundBound when the coordinator named no phase timeouts: a day, i.e. no bound of the agent's own.
inline constexpr std::chrono::milliseconds kNoRoundBound = std::chrono::hours(24);

struct SessionOptions {
  std::string bus;
  std::string transport = "ipc";       // or tcp://HOST:PORT (see resolveEndpoints)
  std::optional<CurveClient> curve{};  // tcp to a coordinator that requires CURVE (curve.hpp)
  std::string agentId;                 // 1..kMaxAgentIdBytes bytes
  msg::Role role = msg::Role::Unknown;
  std::int32_t requestedRank = -1;
  std::vector<msg::ChannelKind> channels{msg::ChannelKind::Shm};
  // Where peers reach this agent for the channels that need it (ChannelListeners::contacts()), in every hello.
  std::vector<ChannelContact> channelContacts{};
  // A worker that binds slices (docs/regions.md): what it binds, in every hello. Null: every tensor whole.
  std::shared_ptr<const ReceiverBindings> bindings{};
  std::chrono::milliseconds registrationTimeout = kRegistrationTimeout;
  LinkHeartbeat link{};  // how soon a silent coordinator's connection counts as lost
};

// What the coordinator granted (from Welcome).
struct Registration {
  std::uint32_t slot = 0;
  std::int32_t rank = -1;
  std::uint32_t worldSize = 0;
  std::uint64_t epoch = 0;
  std::uint64_t committedVersion = 0;
  std::chrono::milliseconds heartbeatInterval{200};
  std::chrono::milliseconds heartbeatTimeout{2000};
  // The last commit: an agent that lost its connection mid-round learns from it what the bus decided.
  std::uint64_t committedRound = 0;
  Digest committedDigest{};  // zero when the coordinator does not know it (it restarted since)
  // The last commit was a region round: this worker's receiver digest in it (docs/regions.md); zero otherwise.
  Digest committedReceiverDigest{};
  // The coordinator's phase timeouts, from which an agent bounds its own wait for a round's outcome (roundBound).
  std::chrono::milliseconds pauseTimeout{0};
  std::chrono::milliseconds transferTimeout{0};
  std::chrono::milliseconds sourcesTimeout{0};  // a region round's wait for its last rank (docs/regions.md)
  std::chrono::milliseconds transferTimeoutPerGiB{0};
  bool operatorPaused = false;  // an operator's pause holds: a worker keeps its engine paused
  msg::PauseMode operatorPauseMode = msg::PauseMode::Keep;
  // The proof of this registration (registration_secret.hpp): in the hello of a registration on a new connection,
  // and in every SlotReport.
  RegistrationSecret secret{};

  // The longest a round of `payloadBytes` can last before the coordinator ends it, plus the time its last message
  // needs to arrive: an agent that has heard nothing of its round by then has lost it (docs/faults.md).
  std::chrono::milliseconds roundBound(std::uint64_t payloadBytes) const;
};

// One delivery from the coordinator.
struct SessionDelivery {
  std::optional<Message> message;
  // The connection was lost (or replaced: restartConnection()) and the registration with it: whatever the agent
  // was doing for its round must end now, without waiting for a coordinator that may be gone or frozen. The agent
  // is registering again on a new connection.
  bool linkLost = false;
  // Set on the first delivery after the agent registered again (a restarted coordinator, a lost link, a coordinator
  // that had dropped it): registration() holds the new Welcome, with what the bus committed meanwhile.
  bool reregistered = false;
  bool woken = false;  // wake() was called
};

// Threading: one I/O thread calls everything except appliedVersion-style slot writes, which are atomic. The
// session owns a second thread that only beats the shared-memory heartbeat word.
class AgentSession {
 public:
  static tl::expected<std::unique_ptr<AgentSession>, SessionFailure> open(zmq::context_t& context,
                                                                          SessionOptions options);
  ~AgentSession();
  AgentSession(const AgentSession&) = delete;
  AgentSession& operator=(const AgentSession&) = delete;

  // Says hello and waits for the Welcome (retrying a refused duplicate id until the timeout). `appliedVersion`
  // is what this agent serves (a worker) or the last version it knows committed (a trainer).
  tl::expected<Registration, SessionFailure> registerAgent(std::uint64_t appliedVersion);

  // The next message for the agent, waiting up to `timeout`. Sends the Heartbeat message when it is due, and
  // answers a coordinator that no longer knows us (it restarted) by registering again; the Welcome is consumed
  // here and reported as `reregistered`. Error replies to messages sent before the current registration are
  // dropped: they are the new coordinator refusing what was queued for the old one.
  tl::expected<SessionDelivery, SessionFailure> next(std::chrono::milliseconds timeout);

  // Stamps and sends one message to the coordinator.
  template <typename Body>
  tl::expected<void, SessionFailure> send(MessageBuilder& builder, flatbuffers::Offset<Body> body) {
    return sendBytes(builder.finish(body, EnvelopeStamp{registration_.epoch, ++requestSeq_}));
  }
  // Makes a next() that is waiting (or the next call) return at once with `woken`. Any thread may call it: an
  // agent's API thread uses it to hand work to the I/O thread without that thread polling.
  void wake();

  // Frees the slot at the coordinator now rather than after the heartbeat timeout.
  void goodbye(const std::string& reason);

  // Gives up the connection and the registration it carried, and registers again on a new one: for an agent that
  // has heard nothing of its round for longer than the round can last (a message lost, a coordinator stuck). The
  // next delivery reports `linkLost`.
  void restartConnection(const std::string& why);

  // Test faults (fault_injection.hpp): cuts the control connection as a broken link to another host would (its
  // messages and heartbeats stop; what was queued is lost), stays silent for `outage`, then connects again under a
  // new routing id and registers again, as after any lost link (next() reports `linkLost`, then `reregistered`).
  void dropConnection(std::chrono::milliseconds outage);

  bool registered() const { return slot_ != nullptr; }
  // The seq of the last message sent: replies (Error::in_reply_to) refer to it.
  std::uint64_t lastRequestSeq() const { return requestSeq_; }
  const Registration& registration() const { return registration_; }
  const SessionOptions& options() const { return options_; }
  // The agent's own slot (agent_slot.hpp); valid once registered (replaced on re-registration, so do not keep the
  // reference).
  AgentSlot& slot() { return *slot_; }
  // What the coordinator states for the whole bus (committed version, pause word), for the agent's engine: the
  // control block on the coordinator's host, else the mirror of its beats. Valid once registered; replaced with
  // every registration (holders keep theirs alive). Called on the I/O thread.
  std::shared_ptr<const BusView> busView() const { return view_; }
  // Whether this registration is with a coordinator on another host (its shared memory out of reach).
  bool remote() const { return remote_; }
  // The applied (worker) or known-committed (trainer) version reported in hellos and heartbeats.
  void setAppliedVersion(std::uint64_t version);
  std::uint64_t appliedVersion() const { return appliedVersion_.load(std::memory_order_acquire); }
  zmq::socket_ref handle() { return dealer_.handle(); }

 private:
  AgentSession(zmq::context_t& context, SessionOptions options, std::string requestEndpoint, std::string eventEndpoint,
               DealerEndpoint&& dealer, int wakeFd)
      : context_(&context),
        options_(std::move(options)),
        requestEndpoint_(std::move(requestEndpoint)),
        eventEndpoint_(std::move(eventEndpoint)),
        dealer_(std::move(dealer)),
        wakeFd_(wakeFd) {}

  tl::expected<void, SessionFailure> sendBytes(std::span<const std::uint8_t> bytes);
  tl::expected<void, SessionFailure> sendHello();
  // Closes the connection (nothing queued is sent), ends the registration it carried (the shared-memory heartbeat
  // stops, so that the old registration expires) and, after `outage`, connects again under a new routing id and
  // says hello. The next delivery reports `linkLost`.
  void replaceConnection(std::chrono::milliseconds outage);
  void sendHeartbeatIfDue();
  // On another host: whether the beats of the coordinator that welcomed us stopped for a heartbeat timeout, or
  // come from another coordinator (the mirror's evidence, which the agent's own transfers act on).
  bool eventStreamLost() const;
  // Handles a Welcome or a registration Error; returns true when the message was one of them.
  tl::expected<bool, SessionFailure> handleRegistrationReply(const Message& message);
  void startHeartbeatThread();
  void stopHeartbeatThread();

  zmq::context_t* context_;
  SessionOptions options_;
  std::string requestEndpoint_;
  std::string eventEndpoint_;  // the bus mirror subscribes there
  DealerEndpoint dealer_;
  int wakeFd_;  // eventfd
  MessageBuilder builder_;
  Registration registration_;
  // Opens the slot and the bus view for a Welcome: the coordinator's block on its host, else a remote slot and the
  // mirror (started at the first such Welcome and kept).
  tl::expected<void, SessionFailure> openSlot(const Registration& granted, bool remote);

  std::unique_ptr<AgentSlot> slot_;
  std::shared_ptr<const BusView> view_;
  std::shared_ptr<BusMirror> mirror_;
  bool remote_ = false;
  std::atomic<std::uint64_t> appliedVersion_{0};
  std::uint64_t requestSeq_ = 0;
  std::uint64_t helloSeq_ = 0;  // seq of the hello the current registration answers
  bool awaitingWelcome_ = false;
  bool linkLostPending_ = false;  // replaceConnection() ran and next() has not reported it yet
  bool refusedDuplicate_ = false;
  std::optional<SessionFailure> refusal_;  // a refusal other than a duplicate id, for registerAgent
  std::chrono::steady_clock::time_point nextHeartbeat_{};
  std::chrono::steady_clock::time_point nextHelloRetry_{};

  std::atomic<bool> beating_{false};
  std::thread heartbeatThread_;
};

}  // namespace wsync::bus
