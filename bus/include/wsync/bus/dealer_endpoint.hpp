#pragma once
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/curve.hpp"
#include "wsync/bus/received.hpp"
#include "wsync/bus/rejection_counters.hpp"
#include "wsync/bus/transport_error.hpp"

namespace wsync::bus {

// An agent's side of addressed requests: a DEALER socket. ZeroMQ reconnects by itself when the coordinator
// restarts.
//
// Its routing id is "<label>#<8 random hex digits>": the label (the agent id) makes the coordinator's logs
// readable, the suffix makes every connection's id unique. A ROUTER silently ignores a second connection under an
// id it already has, so with plain agent ids a restarted agent whose old connection is still half-open would never
// be heard, and the coordinator could not even tell it "duplicate agent". Agents identify themselves in AgentHello;
// the coordinator maps agent id to routing id.
class DealerEndpoint {
 public:
  // `curve`: a CURVE client with these keys (tcp to a coordinator that requires it; curve.hpp).
  static tl::expected<DealerEndpoint, TransportFailure> connect(zmq::context_t& context, const std::string& endpoint,
                                                                std::string_view label,
                                                                const std::optional<CurveClient>& curve = {});

  tl::expected<void, TransportFailure> send(std::span<const std::uint8_t> bytes);
  tl::expected<std::optional<Received>, TransportFailure> receive(std::chrono::milliseconds timeout);

  // Why the coordinator's end refused this connection's security handshake, once it has (a CURVE key not on its
  // allowlist, CURVE on one side only, a wrong server key); nothing while none failed. Watched on tcp only: ipc
  // endpoints are plain and guarded by file permissions. ZeroMQ retries a refused handshake by itself, silently, so
  // without this a refused agent would only ever see its registration time out.
  std::optional<std::string> handshakeRefusal();

  const RejectionCounters& rejections() const { return rejections_; }
  // What the coordinator sees as Received::source for this connection.
  const std::string& routingId() const { return routingId_; }
  zmq::socket_ref handle() { return socket_; }

 private:
  DealerEndpoint(zmq::socket_t&& socket, std::optional<zmq::socket_t>&& monitor, std::string routingId)
      : socket_(std::move(socket)), monitor_(std::move(monitor)), routingId_(std::move(routingId)) {}

  zmq::socket_t socket_;
  std::optional<zmq::socket_t> monitor_;  // the socket monitor's handshake-failure events (tcp only)
  std::string routingId_;
  RejectionCounters rejections_;
  std::optional<std::string> refusal_;
};

}  // namespace wsync::bus
