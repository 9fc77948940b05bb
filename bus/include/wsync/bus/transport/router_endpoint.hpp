#pragma once
#include <chrono>
#include <cstdint>
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

// The coordinator's side of addressed requests: a ROUTER socket with ROUTER_MANDATORY, so that a reply to a peer
// that is gone fails with PeerUnreachable instead of vanishing. Sends never block.
class RouterEndpoint {
 public:
  // `ioThreadAffinity`: ZMQ_AFFINITY, the context's I/O threads (bit i: thread i) this socket's connections use;
  // 0 leaves the choice to ZeroMQ. `curveServer`: a CURVE server with this key pair (tcp, curve.hpp). `link`: how
  // soon a connection whose peer stopped answering is dropped.
  static tl::expected<RouterEndpoint, TransportFailure> bind(zmq::context_t& context, const std::string& endpoint,
                                                             std::uint64_t ioThreadAffinity = 0,
                                                             const std::optional<CurveKeyPair>& curveServer = {},
                                                             const LinkHeartbeat& link = {});

  // Waits up to `timeout` (0: just look) for one request; empty when none arrived.
  tl::expected<std::optional<Received>, TransportFailure> receive(std::chrono::milliseconds timeout);
  tl::expected<void, TransportFailure> send(std::string_view peer, std::span<const std::uint8_t> bytes);

  const RejectionCounters& rejections() const { return rejections_; }
  // The bound address; for tcp://HOST:0 it carries the port the system chose.
  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_ref handle() { return socket_; }

 private:
  RouterEndpoint(zmq::socket_t&& socket, std::string endpoint)
      : socket_(std::move(socket)), endpoint_(std::move(endpoint)) {}

  zmq::socket_t socket_;
  std::string endpoint_;
  RejectionCounters rejections_;
};

}  // namespace wsync::bus
