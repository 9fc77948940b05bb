#include "wsync/bus/dealer_endpoint.hpp"

#include <random>

#include "frames.hpp"
#include "wsync/bus/protocol.hpp"
#include "wsync/bus/socket_options.hpp"

namespace wsync::bus {

namespace {

std::string uniqueRoutingId(std::string_view label) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device entropy;
  std::uint32_t nonce = entropy();
  std::string id(label);
  id += '#';
  for (int digit = 0; digit < 8; ++digit, nonce >>= 4) id += kHex[nonce & 0xFU];
  return id;
}

}  // namespace

tl::expected<DealerEndpoint, TransportFailure> DealerEndpoint::connect(zmq::context_t& context,
                                                                      const std::string& endpoint,
                                                                      std::string_view label,
                                                                      const std::optional<CurveClient>& curve) {
  // ZeroMQ reserves routing ids starting with a zero byte.
  if (label.size() > kMaxAgentIdBytes || (!label.empty() && label.front() == '\0')) {
    return fail(TransportError::ConnectFailed, "label must be at most " + std::to_string(kMaxAgentIdBytes) +
                                                   " bytes and not start with a zero byte");
  }
  try {
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    applyCommonOptions(socket);
    std::string routingId = uniqueRoutingId(label);
    socket.set(zmq::sockopt::routing_id, zmq::buffer(routingId.data(), routingId.size()));
    if (curve) applyCurveClient(socket, *curve);
    socket.connect(endpoint);
    return DealerEndpoint(std::move(socket), std::move(routingId));
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
