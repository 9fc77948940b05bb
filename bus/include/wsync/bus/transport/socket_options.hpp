#pragma once
// Options every bus socket gets, with the reasons for their values.
#include <algorithm>
#include <chrono>

#include <zmq.hpp>

namespace wsync::bus {

// Pending messages get this long to leave when a socket closes: acks flush on a clean exit, and a dead peer can
// never make close() hang.
inline constexpr std::chrono::milliseconds kSocketLinger{200};

// ZMTP-level heartbeats find a peer that stopped answering while its connection stayed open (a crashed host, a cut
// cable, a process frozen by SIGSTOP or a debugger) and drop the connection; a peer that exits is found at once by
// the kernel. Agent liveness in a round is judged separately, by application heartbeats with their own timeout; an
// agent whose link drops registers again on a new connection (docs/faults.md, "Freezes").
inline constexpr std::chrono::milliseconds kZmtpHeartbeatTimeout{5000};
// Five pings per timeout: one lost ping is not a dead link.
inline constexpr int kZmtpPingsPerTimeout = 5;

// How fast a link is declared dead. The programs take --link-timeout-ms (tests shorten it to keep the fault suite
// inside CI's time).
struct LinkHeartbeat {
  std::chrono::milliseconds timeout = kZmtpHeartbeatTimeout;

  std::chrono::milliseconds interval() const {
    return std::max(std::chrono::milliseconds(1), timeout / kZmtpPingsPerTimeout);
  }
};

// Queued messages per peer before ROUTER sends fail with WouldBlock and PUB drops: control traffic is small and
// bounded, so a full queue means a stuck peer, and a late joiner recovers what PUB dropped from a snapshot.
inline constexpr int kHighWaterMark = 10'000;

// Applied to every bus socket before bind/connect: bounded linger, MAXMSGSIZE, high-water marks, heartbeats.
void applyCommonOptions(zmq::socket_t& socket, const LinkHeartbeat& link = {});

}  // namespace wsync::bus
