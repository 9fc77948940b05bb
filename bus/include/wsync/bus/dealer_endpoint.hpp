#pragma once
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/received.hpp"
#include "wsync/bus/rejection_counters.hpp"
#include "wsync/bus/transport_error.hpp"

namespace wsync::bus {

// An agent's side of addressed requests: a DEALER socket whose routing id is the agent id, so the coordinator
// can address replies and acks to it. ZeroMQ reconnects by itself when the coordinator restarts.
class DealerEndpoint {
 public:
  static tl::expected<DealerEndpoint, TransportFailure> connect(zmq::context_t& context, const std::string& endpoint,
                                                                std::string_view routingId);

  tl::expected<void, TransportFailure> send(std::span<const std::uint8_t> bytes);
  tl::expected<std::optional<Received>, TransportFailure> receive(std::chrono::milliseconds timeout);

  const RejectionCounters& rejections() const { return rejections_; }
  zmq::socket_ref handle() { return socket_; }

 private:
  explicit DealerEndpoint(zmq::socket_t&& socket) : socket_(std::move(socket)) {}

  zmq::socket_t socket_;
  RejectionCounters rejections_;
};

}  // namespace wsync::bus
