#include "wsync/bus/dealer_endpoint.hpp"

#include "frames.hpp"
#include "wsync/bus/protocol.hpp"
#include "wsync/bus/socket_options.hpp"

namespace wsync::bus {

tl::expected<DealerEndpoint, TransportFailure> DealerEndpoint::connect(zmq::context_t& context,
                                                                      const std::string& endpoint,
                                                                      std::string_view routingId) {
  // ZeroMQ reserves routing ids starting with a zero byte.
  if (routingId.empty() || routingId.size() > kMaxAgentIdBytes || routingId.front() == '\0') {
    return fail(TransportError::ConnectFailed, "routing id must be 1 to " + std::to_string(kMaxAgentIdBytes) +
                                                   " bytes and not start with a zero byte");
  }
  try {
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    applyCommonOptions(socket);
    socket.set(zmq::sockopt::routing_id, zmq::buffer(routingId.data(), routingId.size()));
    socket.connect(endpoint);
    return DealerEndpoint(std::move(socket));
  } catch (const zmq::error_t& error) {
    return tl::unexpected(detail::toFailure(error, TransportError::ConnectFailed, endpoint));
  }
}

tl::expected<void, TransportFailure> DealerEndpoint::send(std::span<const std::uint8_t> bytes) {
  return detail::sendMessage(socket_, false, {}, bytes);
}

tl::expected<std::optional<Received>, TransportFailure> DealerEndpoint::receive(std::chrono::milliseconds timeout) {
  return detail::receiveMessage(socket_, timeout, 1, rejections_);
}

}  // namespace wsync::bus
