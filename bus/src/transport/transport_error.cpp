#include "wsync/bus/transport/transport_error.hpp"

namespace wsync::bus {

std::string_view toString(TransportError error) {
  switch (error) {
    case TransportError::InvalidBusName:
      return "invalid bus name";
    case TransportError::InvalidEndpoint:
      return "invalid transport";
    case TransportError::RuntimeDirUnsafe:
      return "unsafe runtime folder";
    case TransportError::RuntimeDirFailed:
      return "cannot create runtime folder";
    case TransportError::PathTooLong:
      return "socket path too long";
    case TransportError::BindFailed:
      return "bind failed";
    case TransportError::ConnectFailed:
      return "connect failed";
    case TransportError::PeerUnreachable:
      return "peer unreachable";
    case TransportError::WouldBlock:
      return "peer queue full";
    case TransportError::MessageTooLarge:
      return "message too large";
    case TransportError::Interrupted:
      return "interrupted";
    case TransportError::Closed:
      return "context closed";
    case TransportError::SocketFailed:
      return "socket error";
  }
  return "unknown transport error";
}

}  // namespace wsync::bus
