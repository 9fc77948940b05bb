#include "wsync/bus/transport/socket_options.hpp"

#include "wsync/bus/protocol/protocol.hpp"

namespace wsync::bus {

void applyCommonOptions(zmq::socket_t& socket, const LinkHeartbeat& link) {
  socket.set(zmq::sockopt::linger, static_cast<int>(kSocketLinger.count()));
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
  socket.set(zmq::sockopt::sndhwm, kHighWaterMark);
  socket.set(zmq::sockopt::rcvhwm, kHighWaterMark);
  socket.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(link.interval().count()));
  socket.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(link.timeout.count()));
  socket.set(zmq::sockopt::heartbeat_ttl, static_cast<int>(link.timeout.count()));
}

}  // namespace wsync::bus
