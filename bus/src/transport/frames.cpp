#include "transport/frames.hpp"

#include <cerrno>

#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/transport/bounded_poll.hpp"

namespace wsync::bus::detail {

TransportFailure toFailure(const zmq::error_t& error, TransportError fallback, const std::string& context) {
  TransportError code = fallback;
  switch (error.num()) {
    case EHOSTUNREACH:
      code = TransportError::PeerUnreachable;
      break;
    case EAGAIN:
      code = TransportError::WouldBlock;
      break;
    case EINTR:
      code = TransportError::Interrupted;
      break;
    case ETERM:
      code = TransportError::Closed;
      break;
    default:
      break;
  }
  return TransportFailure{code, context + ": " + error.what()};
}

tl::expected<std::optional<Received>, TransportFailure> receiveMessage(zmq::socket_t& socket,
                                                                       std::chrono::milliseconds timeout,
                                                                       std::size_t frameCount,
                                                                       RejectionCounters& rejections) {
  // Frames beyond the expected ones are read into `overflow` and dropped.
  std::array<zmq::message_t, 2> frames;
  zmq::message_t overflow;
  std::size_t received = 0;
  try {
    if (timeout.count() > 0) {  // zero or less: only what is already here
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      if (boundedPoll(&item, 1, timeout) == 0) return std::nullopt;
    }
    if (!socket.recv(frames[0], zmq::recv_flags::dontwait)) return std::nullopt;
    received = 1;
    // A multipart message arrives whole, so the remaining frames are already here. The "more" flag is read from
    // the frame itself: cheaper than asking the socket (ZMQ_RCVMORE) each time.
    bool more = frames[0].more();
    while (more) {
      zmq::message_t& target = received < frameCount ? frames[received] : overflow;
      (void)socket.recv(target, zmq::recv_flags::none);
      more = target.more();
      ++received;
    }
  } catch (const zmq::error_t& error) {
    return tl::unexpected(toFailure(error, TransportError::SocketFailed, "receive"));
  }

  Received delivery{{}, tl::unexpected(MessageError::BadFraming), {}, {}};
  if (frameCount == 2 && received >= 1) delivery.source = frames[0].to_string();
  if (frameCount == 2 && received == frameCount) {
    // Set by the ZAP handler's reply (zap_authenticator.cpp) on every message of a CURVE connection, absent
    // otherwise. Read from the body: the routing-id frame is the ROUTER's own and carries no metadata.
    const char* userId = ::zmq_msg_gets(frames[1].handle(), "User-Id");
    if (userId != nullptr) delivery.peerKey = userId;
  }
  if (received == frameCount) delivery.message = Message::decode(std::move(frames[frameCount - 1]), delivery.detail);
  if (!delivery.message) rejections.count(delivery.message.error());
  return delivery;
}

tl::expected<void, TransportFailure> sendMessage(zmq::socket_t& socket, bool withPrefix, std::string_view prefix,
                                                 std::span<const std::uint8_t> bytes) {
  if (bytes.size() > kMaxMessageBytes) {
    return tl::unexpected(
        TransportFailure{TransportError::MessageTooLarge,
                         std::to_string(bytes.size()) + " bytes (limit " + std::to_string(kMaxMessageBytes) + ")"});
  }
  try {
    if (withPrefix) {
      if (!socket.send(zmq::buffer(prefix.data(), prefix.size()),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return tl::unexpected(TransportFailure{TransportError::WouldBlock, std::string(prefix)});
      }
    }
    if (!socket.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)) {
      return tl::unexpected(TransportFailure{TransportError::WouldBlock, std::string(prefix)});
    }
  } catch (const zmq::error_t& error) {
    return tl::unexpected(toFailure(error, TransportError::SocketFailed, "send to '" + std::string(prefix) + "'"));
  }
  return {};
}

}  // namespace wsync::bus::detail
