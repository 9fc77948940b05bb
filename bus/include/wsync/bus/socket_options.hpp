#pragma once
// Options every bus socket gets, with the reasons for their values.
#include <chrono>

#include <zmq.hpp>

namespace wsync::bus {

// Pending messages get this long to leave when a socket closes: acks flush on a clean exit, and a dead peer can
// never make close() hang.
inline constexpr std::chrono::milliseconds kSocketLinger{200};

// ZMTP-level heartbeats find a dead tcp peer whose connection never closed (a crashed host, a cut cable) and drop
// the connection; ipc peers are found at once by the kernel. Agent liveness in a round is judged separately, by
// application heartbeats with their own timeout.
inline constexpr std::chrono::milliseconds kZmtpHeartbeatInterval{1000};
inline constexpr std::chrono::milliseconds kZmtpHeartbeatTimeout{5000};

// Queued messages per peer before ROUTER sends fail with WouldBlock and PUB drops: control traffic is small and
// bounded, so a full queue means a stuck peer, and a late joiner recovers what PUB dropped from a snapshot.
inline constexpr int kHighWaterMark = 10'000;

// Applied to every bus socket before bind/connect: bounded linger, MAXMSGSIZE, high-water marks, heartbeats.
void applyCommonOptions(zmq::socket_t& socket);

}  // namespace wsync::bus
