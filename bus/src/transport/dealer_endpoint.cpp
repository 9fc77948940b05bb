#include "wsync/bus/transport/dealer_endpoint.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include "transport/frames.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/transport/socket_options.hpp"

namespace wsync::bus {

namespace {

std::string uniqueRoutingId(std::string_view label) {
  std::random_device entropy;
  // 8 hex digits of a 32-bit nonce.
  return std::string(label) + '#' + hex64(entropy()).substr(8);
}

constexpr int kHandshakeFailures = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
constexpr int kWatchedEvents = kHandshakeFailures | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED;

// What an agent's operator should read for a handshake the coordinator's end refused.
std::string describeHandshakeFailure(std::uint16_t event, std::uint32_t value, const std::string& address) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    return "the coordinator at " + address + " refused this client's CURVE key (ZAP status " + std::to_string(value) +
           "): its public key is not on the coordinator's --allow-keys list";
  }
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return "the coordinator at " + address +
           " and this client disagree on CURVE (one uses it, the other not): "
           "give the client --curve-keys and --server-key for a coordinator started with --curve-keys";
  }
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
    return "the CURVE handshake with the coordinator at " + address +
           " failed: is --server-key the coordinator's public key?";
  }
  char code[16];
  std::snprintf(code, sizeof code, "0x%08x", value);
  return "the security handshake with the coordinator at " + address + " failed (ZeroMQ protocol error " + code + ")";
}

}  // namespace

tl::expected<DealerEndpoint, TransportFailure> DealerEndpoint::connect(zmq::context_t& context,
                                                                       const std::string& endpoint,
                                                                       std::string_view label,
                                                                       const std::optional<CurveClient>& curve,
                                                                       const LinkHeartbeat& link) {
  // ZeroMQ reserves routing ids starting with a zero byte.
  if (label.size() > kMaxAgentIdBytes || (!label.empty() && label.front() == '\0')) {
    return fail(TransportError::ConnectFailed,
                "label must be at most " + std::to_string(kMaxAgentIdBytes) + " bytes and not start with a zero byte");
  }
  try {
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    applyCommonOptions(socket, link);
    std::string routingId = uniqueRoutingId(label);
    socket.set(zmq::sockopt::routing_id, zmq::buffer(routingId.data(), routingId.size()));
    if (curve) applyCurveClient(socket, *curve);
    // Before connect, so that the first handshake's outcome is seen too.
    const std::string monitorEndpoint = "inproc://wsync-dealer-monitor-" + routingId;
    if (zmq_socket_monitor(socket.handle(), monitorEndpoint.c_str(), kWatchedEvents) != 0) throw zmq::error_t();
    zmq::socket_t monitor(context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(monitorEndpoint);
    socket.connect(endpoint);
    return DealerEndpoint(std::move(socket), std::move(monitor), std::move(routingId), endpoint.starts_with("tcp://"));
  } catch (const zmq::error_t& error) {
    return tl::unexpected(detail::toFailure(error, TransportError::ConnectFailed, endpoint));
  }
}

DealerEndpoint::~DealerEndpoint() { stopMonitor(); }

DealerEndpoint& DealerEndpoint::operator=(DealerEndpoint&& other) noexcept {
  if (this == &other) return *this;
  stopMonitor();
  socket_ = std::move(other.socket_);
  monitor_ = std::move(other.monitor_);
  routingId_ = std::move(other.routingId_);
  watchHandshake_ = other.watchHandshake_;
  rejections_ = other.rejections_;
  refusal_ = std::move(other.refusal_);
  connected_ = other.connected_;
  linkLost_ = other.linkLost_;
  return *this;
}

void DealerEndpoint::stopMonitor() noexcept {
  // A null endpoint stops monitoring (zmq_socket_monitor(3)); the monitor's PAIR is then closed by libzmq itself.
  if (socket_.handle() != nullptr) (void)zmq_socket_monitor(socket_.handle(), nullptr, 0);
}

tl::expected<void, TransportFailure> DealerEndpoint::send(std::span<const std::uint8_t> bytes) {
  return detail::sendMessage(socket_, false, {}, bytes);
}

void DealerEndpoint::readEvents() {
  // An event is two frames: [uint16 event, uint32 value] and the peer's address.
  zmq::message_t head;
  zmq::message_t address;
  while (monitor_.recv(head, zmq::recv_flags::dontwait)) {
    if (!head.more() || !monitor_.recv(address, zmq::recv_flags::dontwait)) continue;
    if (head.size() < sizeof(std::uint16_t) + sizeof(std::uint32_t)) continue;
    std::uint16_t event = 0;
    std::uint32_t value = 0;
    std::memcpy(&event, head.data(), sizeof event);
    std::memcpy(&value, static_cast<const char*>(head.data()) + sizeof event, sizeof value);
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      connected_ = true;
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      // Before a first handshake this is a connection attempt that failed, which ZeroMQ retries by itself.
      if (connected_) linkLost_ = true;
    } else if ((event & kHandshakeFailures) != 0 && watchHandshake_ && !refusal_) {
      refusal_ = describeHandshakeFailure(event, value, address.to_string());
    }
  }
}

std::optional<std::string> DealerEndpoint::handshakeRefusal(std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!refusal_) {
    readEvents();
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (refusal_ || left <= std::chrono::milliseconds{0}) break;
    zmq::pollitem_t item{monitor_.handle(), 0, ZMQ_POLLIN, 0};
    (void)zmq::poll(&item, 1, left);
  }
  return refusal_;
}

bool DealerEndpoint::linkLost() {
  if (!linkLost_) readEvents();
  return linkLost_;
}

tl::expected<std::optional<Received>, TransportFailure> DealerEndpoint::receive(std::chrono::milliseconds timeout) {
  return detail::receiveMessage(socket_, timeout, 1, rejections_);
}

}  // namespace wsync::bus
