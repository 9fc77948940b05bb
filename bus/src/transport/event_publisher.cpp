#include "wsync/bus/transport/event_publisher.hpp"

#include "transport/frames.hpp"
#include "wsync/bus/transport/socket_options.hpp"

namespace wsync::bus {

tl::expected<EventPublisher, TransportFailure> EventPublisher::bind(zmq::context_t& context,
                                                                    const std::string& endpoint,
                                                                    std::uint64_t ioThreadAffinity,
                                                                    const std::optional<CurveKeyPair>& curveServer) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::pub);
    applyCommonOptions(socket);
    if (ioThreadAffinity != 0) socket.set(zmq::sockopt::affinity, ioThreadAffinity);
    if (curveServer) applyCurveServer(socket, *curveServer);
    socket.bind(endpoint);
    std::string bound = socket.get(zmq::sockopt::last_endpoint);
    return EventPublisher(std::move(socket), std::move(bound));
  } catch (const zmq::error_t& error) {
    return tl::unexpected(detail::toFailure(error, TransportError::BindFailed, endpoint));
  }
}

std::uint64_t EventPublisher::lastSequence(std::string_view family) const {
  const auto found = sequences_.find(family);
  return found == sequences_.end() ? 0 : found->second;
}

std::uint64_t& EventPublisher::sequenceOf(std::string_view family) {
  auto found = sequences_.find(family);
  if (found == sequences_.end()) found = sequences_.emplace(std::string(family), 0).first;
  return found->second;
}

tl::expected<void, TransportFailure> EventPublisher::sendEvent(std::string_view topic,
                                                               std::span<const std::uint8_t> bytes) {
  return detail::sendMessage(socket_, true, topic, bytes);
}

}  // namespace wsync::bus
