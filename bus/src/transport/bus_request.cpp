#include "wsync/bus/transport/bus_request.hpp"

#include <algorithm>

namespace wsync::bus {

namespace {

// While waiting for the answer, how often to look whether the coordinator refused this client's handshake.
constexpr std::chrono::milliseconds kAnswerSlice{100};

}  // namespace

std::string_view toString(RequestError error) {
  switch (error) {
    case RequestError::Transport:
      return "transport";
    case RequestError::Refused:
      return "refused";
    case RequestError::NoAnswer:
      return "no answer";
    case RequestError::Undecodable:
      return "undecodable answer";
  }
  return "unknown request error";
}

tl::expected<bus::Message, RequestFailure> requestOnce(bus::DealerEndpoint& dealer,
                                                       std::span<const std::uint8_t> request,
                                                       std::chrono::milliseconds timeout) {
  if (auto sent = dealer.send(request); !sent) return bus::fail(RequestError::Transport, sent.error().describe());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    auto received = dealer.receive(std::clamp(left, milliseconds(0), kAnswerSlice));
    if (!received) return bus::fail(RequestError::Transport, received.error().describe());
    if (*received) {
      if (!(*received)->message) {
        return bus::fail(RequestError::Undecodable, std::string(bus::toString((*received)->message.error())));
      }
      return std::move(*(*received)->message);
    }
    if (auto refused = dealer.handshakeRefusal()) return bus::fail(RequestError::Refused, *refused);
    if (left <= milliseconds(0)) {
      return bus::fail(RequestError::NoAnswer, "no answer within " + std::to_string(timeout.count()) + " ms");
    }
  }
}

}  // namespace wsync::bus
