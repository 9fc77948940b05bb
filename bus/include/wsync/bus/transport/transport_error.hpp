#pragma once
#include <cstdint>
#include <string_view>

#include "wsync/bus/core/failure.hpp"

namespace wsync::bus {

// Failures of addressing and of the ZeroMQ sockets. "Nothing arrived in time" is not an error: receive()
// returns an empty optional for it, as cppzmq does for "would block".
enum class TransportError : std::uint8_t {
  InvalidBusName,    // empty, too long, or characters outside [A-Za-z0-9._-]
  InvalidEndpoint,   // a transport spec that is neither "ipc" nor tcp://HOST:PORT
  RuntimeDirUnsafe,  // the runtime folder exists but is not ours or is open to others
  RuntimeDirFailed,  // the runtime folder could not be created
  PathTooLong,       // an ipc:// path longer than a Unix socket address allows
  BindFailed,        // address in use, permission denied, ...
  ConnectFailed,
  PeerUnreachable,  // ROUTER_MANDATORY: no connected peer has that routing id
  WouldBlock,       // the peer's queue is at its high-water mark
  MessageTooLarge,  // refused before sending: the peer would drop it
  Interrupted,      // a signal arrived while waiting
  Closed,           // the ZeroMQ context is shutting down
  SocketFailed,     // any other ZeroMQ error (see detail)
};

std::string_view toString(TransportError error);

using TransportFailure = Failure<TransportError>;

}  // namespace wsync::bus
