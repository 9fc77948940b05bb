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

#include "wsync/bus/curve.hpp"
#include "wsync/bus/control_block.hpp"
#include "wsync/bus/dealer_endpoint.hpp"
#include "wsync/bus/failure.hpp"
#include "wsync/bus/message.hpp"

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

struct SessionOptions {
  std::string bus;
  std::string transport = "ipc";  // or tcp://HOST:PORT (see resolveEndpoints)
  std::optional<CurveClient> curve{};  // tcp to a coordinator that requires CURVE (curve.hpp)
  std::string agentId;            // 1..kMaxAgentIdBytes bytes
  msg::Role role = msg::Role::Unknown;
  std::int32_t requestedRank = -1;
  std::vector<msg::ChannelKind> channels{msg::ChannelKind::Shm};
  std::chrono::milliseconds registrationTimeout = kRegistrationTimeout;
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
};

// One delivery from the coordinator. `reregistered` is set on the first delivery after the agent registered
// again with a restarted coordinator: whatever round the agent was in is gone.
struct SessionDelivery {
  std::optional<Message> message;
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

  // Test faults (fault_injection.hpp): cuts the control connection as a broken link to another host would (its
  // messages and heartbeats stop; what was queued is lost), stays silent for `outage`, then connects again under a
  // new routing id. The coordinator, having lost the agent or not, answers its next heartbeat with UnknownAgent and
  // the agent registers again (next() reports `reregistered`), as after a coordinator restart.
  void dropConnection(std::chrono::milliseconds outage);

  bool registered() const { return slot_ != nullptr; }
  // The seq of the last message sent: replies (Error::in_reply_to) refer to it.
  std::uint64_t lastRequestSeq() const { return requestSeq_; }
  const Registration& registration() const { return registration_; }
  const SessionOptions& options() const { return options_; }
  // The agent's own slot; valid once registered (replaced on re-registration, so do not keep the reference).
  AgentSlotWriter& slot() { return *slot_; }
  // The applied (worker) or known-committed (trainer) version reported in hellos and heartbeats.
  void setAppliedVersion(std::uint64_t version);
  std::uint64_t appliedVersion() const { return appliedVersion_.load(std::memory_order_acquire); }
  zmq::socket_ref handle() { return dealer_.handle(); }

 private:
  AgentSession(zmq::context_t& context, SessionOptions options, std::string requestEndpoint, DealerEndpoint&& dealer,
               int wakeFd)
      : context_(&context),
        options_(std::move(options)),
        requestEndpoint_(std::move(requestEndpoint)),
        dealer_(std::move(dealer)),
        wakeFd_(wakeFd) {}

  tl::expected<void, SessionFailure> sendBytes(std::span<const std::uint8_t> bytes);
  tl::expected<void, SessionFailure> sendHello();
  void sendHeartbeatIfDue();
  // Handles a Welcome or a registration Error; returns true when the message was one of them.
  tl::expected<bool, SessionFailure> handleRegistrationReply(const Message& message);
  void startHeartbeatThread();
  void stopHeartbeatThread();

  zmq::context_t* context_;
  SessionOptions options_;
  std::string requestEndpoint_;
  DealerEndpoint dealer_;
  int wakeFd_;  // eventfd
  MessageBuilder builder_;
  Registration registration_;
  std::unique_ptr<AgentSlotWriter> slot_;
  std::atomic<std::uint64_t> appliedVersion_{0};
  std::uint64_t requestSeq_ = 0;
  std::uint64_t helloSeq_ = 0;        // seq of the hello the current registration answers
  bool awaitingWelcome_ = false;
  bool refusedDuplicate_ = false;
  std::optional<SessionFailure> refusal_;  // a refusal other than a duplicate id, for registerAgent
  std::chrono::steady_clock::time_point nextHeartbeat_{};
  std::chrono::steady_clock::time_point nextHelloRetry_{};

  std::atomic<bool> beating_{false};
  std::thread heartbeatThread_;
};

}  // namespace wsync::bus
