#include "wsync/bus/transport/router_endpoint.hpp"

#include "transport/frames.hpp"
#include "wsync/bus/transport/socket_options.hpp"

namespace wsync::bus {

tl::expected<RouterEndpoint, TransportFailure> RouterEndpoint::bind(zmq::context_t& context,
                                                                    const std::string& endpoint,
                                                                    std::uint64_t ioThreadAffinity,
                                                                    const std::optional<CurveKeyPair>& curveServer,
                                                                    const LinkHeartbeat& link) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::router);
    applyCommonOptions(socket, link);
    if (ioThreadAffinity != 0) socket.set(zmq::sockopt::affinity, ioThreadAffinity);
    socket.set(zmq::sockopt::router_mandatory, 1);
    if (curveServer) applyCurveServer(socket, *curveServer);
    socket.bind(endpoint);
    std::string bound = socket.get(zmq::sockopt::last_endpoint);
    return RouterEndpoint(std::move(socket), std::move(bound));
  } catch (const zmq::error_t& error) {
    return tl::unexpected(detail::toFailure(error, TransportError::BindFailed, endpoint));
  }
}

tl::expected<std::optional<Received>, TransportFailure> RouterEndpoint::receive(std::chrono::milliseconds timeout) {
  return detail::receiveMessage(socket_, timeout, 2, rejections_);
}

tl::expected<void, TransportFailure> RouterEndpoint::send(std::string_view peer, std::span<const std::uint8_t> bytes) {
  return detail::sendMessage(socket_, true, peer, bytes);
}

}  // namespace wsync::bus
