#pragma once
// Private to bus/: receiving and sending the frames of one multipart message, and mapping ZeroMQ errors.
#include <array>
#include <chrono>
#include <optional>
#include <span>
#include <string>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/protocol/received.hpp"
#include "wsync/bus/transport/rejection_counters.hpp"
#include "wsync/bus/transport/transport_error.hpp"

namespace wsync::bus::detail {

TransportFailure toFailure(const zmq::error_t& error, TransportError fallback, const std::string& context);

// Receives one whole multipart message whose expected shape is `frameCount` frames: [source][payload] (ROUTER,
// SUB) or [payload] (DEALER). Any other shape is drained and handed back as BadFraming, so a rogue peer cannot
// desynchronise the socket. Decodes the payload and counts rejections; a refusal that names a field (EnumOutOfRange)
// says which in Received::detail.
tl::expected<std::optional<Received>, TransportFailure> receiveMessage(zmq::socket_t& socket,
                                                                       std::chrono::milliseconds timeout,
                                                                       std::size_t frameCount,
                                                                       RejectionCounters& rejections);

// Sends [prefix][bytes], or [bytes] when prefix is empty and `withPrefix` is false, without blocking.
tl::expected<void, TransportFailure> sendMessage(zmq::socket_t& socket, bool withPrefix, std::string_view prefix,
                                                 std::span<const std::uint8_t> bytes);

}  // namespace wsync::bus::detail
