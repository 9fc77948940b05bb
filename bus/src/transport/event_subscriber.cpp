#include "wsync/bus/transport/event_subscriber.hpp"

#include "transport/frames.hpp"
#include "wsync/bus/transport/socket_options.hpp"

namespace wsync::bus {

tl::expected<EventSubscriber, TransportFailure> EventSubscriber::connect(zmq::context_t& context,
                                                                         const std::string& endpoint,
                                                                         const std::vector<std::string>& topicPrefixes,
                                                                         const std::optional<CurveClient>& curve) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::sub);
    applyCommonOptions(socket);
    for (const std::string& prefix : topicPrefixes) socket.set(zmq::sockopt::subscribe, prefix);
    if (curve) applyCurveClient(socket, *curve);
    socket.connect(endpoint);
    return EventSubscriber(std::move(socket));
  } catch (const zmq::error_t& error) {
    return tl::unexpected(detail::toFailure(error, TransportError::ConnectFailed, endpoint));
  }
}

tl::expected<std::optional<Received>, TransportFailure> EventSubscriber::receive(std::chrono::milliseconds timeout) {
  return detail::receiveMessage(socket_, timeout, 2, rejections_);
}

}  // namespace wsync::bus
