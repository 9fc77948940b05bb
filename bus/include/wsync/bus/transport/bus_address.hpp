#pragma once
// Where a bus lives: its validated name, the per-user runtime folder, and its two ZeroMQ endpoints.
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/transport/transport_error.hpp"

namespace wsync::bus {

// Longest bus name; it becomes part of ipc paths and shared-memory names.
inline constexpr std::size_t kMaxBusNameBytes = 48;

// Checks a bus name: 1 to kMaxBusNameBytes characters of [A-Za-z0-9._-], not starting with '.'.
tl::expected<std::string, TransportFailure> validateBusName(std::string_view name);

// The per-user folder for sockets and locks, created 0700 when missing and refused when another user owns it or
// others can enter it: $WSYNC_RUNTIME_DIR, else $XDG_RUNTIME_DIR/wsync, else /tmp/wsync-<uid>.
tl::expected<std::string, TransportFailure> runtimeDirectory();

// The endpoints of one bus. Agents connect to `requests` (ROUTER at the coordinator) and subscribe to `events`
// (PUB at the coordinator).
struct BusEndpoints {
  std::string requests;
  std::string events;
};

// `transport` is "ipc" (default: sockets in the runtime folder, only for this user) or "tcp://HOST:PORT"
// (requests on PORT, events on PORT+1).
tl::expected<BusEndpoints, TransportFailure> resolveEndpoints(std::string_view busName,
                                                              std::string_view transport = "ipc");

}  // namespace wsync::bus
