#include "wsync/bus/socket_options.hpp"

#include "wsync/bus/protocol.hpp"

namespace wsync::bus {

void applyCommonOptions(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, static_cast<int>(kSocketLinger.count()));
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
  socket.set(zmq::sockopt::sndhwm, kHighWaterMark);
  socket.set(zmq::sockopt::rcvhwm, kHighWaterMark);
  socket.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(kZmtpHeartbeatInterval.count()));
  socket.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(kZmtpHeartbeatTimeout.count()));
  socket.set(zmq::sockopt::heartbeat_ttl, static_cast<int>(kZmtpHeartbeatTimeout.count()));
}

}  // namespace wsync::bus
