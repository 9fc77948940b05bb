#pragma once
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/protocol/received.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/rejection_counters.hpp"
#include "wsync/bus/transport/socket_options.hpp"
#include "wsync/bus/transport/transport_error.hpp"

namespace wsync::bus {

// An agent's side of addressed requests: a DEALER socket. ZeroMQ retries the connection by itself until the
// coordinator is up; once a connection was made and lost (linkLost()), the agent replaces the whole endpoint
// (AgentSession): whatever either side sent into the dead connection is gone, so the registration it carried is
// void.
//
// Its routing id is "<label>#<8 random hex digits>": the label (the agent id) makes the coordinator's logs
// readable, the suffix makes every connection's id unique. A ROUTER silently ignores a second connection under an
// id it already has, so with plain agent ids a restarted agent whose old connection is still half-open would never
// be heard, and the coordinator could not even tell it "duplicate agent". Agents identify themselves in AgentHello;
// the coordinator maps agent id to routing id.
class DealerEndpoint {
 public:
  // `curve`: a CURVE client with these keys (tcp to a coordinator that requires it; curve.hpp). `link`: how soon a
  // connection whose peer stopped answering is dropped.
  static tl::expected<DealerEndpoint, TransportFailure> connect(zmq::context_t& context, const std::string& endpoint,
                                                                std::string_view label,
                                                                const std::optional<CurveClient>& curve = {},
                                                                const LinkHeartbeat& link = {});

  tl::expected<void, TransportFailure> send(std::span<const std::uint8_t> bytes);
  tl::expected<std::optional<Received>, TransportFailure> receive(std::chrono::milliseconds timeout);

  // Why the coordinator's end refused this connection's security handshake, once it has (a CURVE key not on its
  // allowlist, CURVE on one side only, a wrong server key); nothing while none failed. Watched on tcp only: ipc
  // endpoints are plain and guarded by file permissions. ZeroMQ retries a refused handshake by itself, silently, so
  // without this a refused agent would only ever see its registration time out. `patience`: how long to wait for
  // the monitor's word when none has come yet.
  std::optional<std::string> handshakeRefusal(std::chrono::milliseconds patience = std::chrono::milliseconds{0});

  // True once a connection to the coordinator was established and then lost: the coordinator exited, closed the
  // connection (it dropped us, or its endpoint was reset), or stopped answering ZMTP heartbeats for the link timeout
  // (frozen, or its host unreachable). Stays true: a lost link is not resumed, the endpoint is replaced.
  bool linkLost();

  // Monitoring is stopped before either socket closes: libzmq's I/O thread sends each event into the monitor's
  // PAIR socket with a blocking send, so an event of the closing socket (its disconnection) sent after the reading
  // end was closed blocks that thread for good, and with it every other socket of the context: a replacement
  // connection's reconnect timer never fires (libzmq issue #3575; seen as an agent that never registered again
  // after its coordinator restarted).
  ~DealerEndpoint();
  DealerEndpoint(DealerEndpoint&& other) noexcept = default;
  DealerEndpoint& operator=(DealerEndpoint&& other) noexcept;
  DealerEndpoint(const DealerEndpoint&) = delete;
  DealerEndpoint& operator=(const DealerEndpoint&) = delete;

  const RejectionCounters& rejections() const { return rejections_; }
  // What the coordinator sees as Received::source for this connection.
  const std::string& routingId() const { return routingId_; }
  zmq::socket_ref handle() { return socket_; }

 private:
  DealerEndpoint(zmq::socket_t&& socket, zmq::socket_t&& monitor, std::string routingId, bool watchHandshake)
      : socket_(std::move(socket)),
        monitor_(std::move(monitor)),
        routingId_(std::move(routingId)),
        watchHandshake_(watchHandshake) {}

  // Takes in the monitor's pending events.
  void readEvents();
  // Stops the socket monitor (nothing once moved from).
  void stopMonitor() noexcept;

  zmq::socket_t socket_;
  zmq::socket_t monitor_;  // the socket monitor's events: handshake outcomes and disconnections
  std::string routingId_;
  bool watchHandshake_;  // tcp: a refused security handshake is reported (ipc has none)
  RejectionCounters rejections_;
  std::optional<std::string> refusal_;
  bool connected_ = false;  // a handshake succeeded at least once
  bool linkLost_ = false;
};

}  // namespace wsync::bus
