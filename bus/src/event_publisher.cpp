#include "wsync/bus/event_publisher.hpp"

#include "frames.hpp"
#include "wsync/bus/socket_options.hpp"

namespace wsync::bus {

tl::expected<EventPublisher, TransportFailure> EventPublisher::bind(zmq::context_t& context,
                                                                    const std::string& endpoint) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::pub);
    applyCommonOptions(socket);
    socket.bind(endpoint);
    std::string bound = socket.get(zmq::sockopt::last_endpoint);
    return EventPublisher(std::move(socket), std::move(bound));
  } catch (const zmq::error_t& error) {
    return tl::unexpected(detail::toFailure(error, TransportError::BindFailed, endpoint));
  }
}

tl::expected<void, TransportFailure> EventPublisher::sendEvent(std::string_view topic,
                                                               std::span<const std::uint8_t> bytes) {
  return detail::sendMessage(socket_, true, topic, bytes);
}

}  // namespace wsync::bus
