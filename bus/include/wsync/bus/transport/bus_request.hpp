#pragma once
// One request to a bus's coordinator and its answer: what wsync-ctl does once per run and the C API's
// wsync_bus_status once per call.
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/core/failure.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"

namespace wsync::bus {

enum class RequestError : std::uint8_t {
  Transport,    // the request could not be sent, or the socket failed
  Refused,      // the coordinator's end refused this client's security handshake (the detail says why)
  NoAnswer,     // nobody answered within the timeout
  Undecodable,  // the answer did not decode
};

std::string_view toString(RequestError error);
using RequestFailure = bus::Failure<RequestError>;

// Sends `request` and waits up to `timeout` for the answer (an Error reply is an answer too). In slices, so that a
// coordinator refusing this client's key is reported at once, not as silence.
tl::expected<bus::Message, RequestFailure> requestOnce(bus::DealerEndpoint& dealer,
                                                       std::span<const std::uint8_t> request,
                                                       std::chrono::milliseconds timeout);

}  // namespace wsync::bus
