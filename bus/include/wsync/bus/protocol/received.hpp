#pragma once
#include <string>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/message_error.hpp"

namespace wsync::bus {

// One delivery from a socket: where it came from and the message, or why it was rejected. A rejected message is
// handed back as a value (the caller can answer the sender) and counted by the socket; it never throws.
struct Received {
  std::string source;  // ROUTER: the sender's routing id; SUB: the topic; DEALER: empty
  tl::expected<Message, MessageError> message;
  // Set when `message` is refused for a reason that names a field (EnumOutOfRange): "ControlRequest.pause_mode =
  // 200 is not one of Abort, Wait, Keep (0..2)"; empty otherwise. rejectionText(error, detail) joins the two.
  std::string detail;
  // ROUTER over CURVE: the sender's public key (Z85) as the ZAP handler admitted it, which no client can choose; empty
  // without CURVE. The coordinator ties a registration to it.
  std::string peerKey;
};

}  // namespace wsync::bus
