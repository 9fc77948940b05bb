#pragma once
// The addresses of the tcp channel (docs/tcp-channel.md): a contact is "HOST:PORT" ("[V6ADDRESS]:PORT" for an IPv6
// address), where HOST is what a receiver connects to. A sender advertises the address of its host on the route
// to the coordinator, so that whoever reaches the coordinator the way it does can reach it too; behind NAT or on a
// host with several networks, WSYNC_PAYLOAD_HOST names the address to advertise instead.
#include <cstdint>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus {

// The environment variable that overrides the advertised host (a name or an address).
inline constexpr const char* kPayloadHostVariable = "WSYNC_PAYLOAD_HOST";

struct TcpContact {
  std::string host;  // without brackets
  std::uint16_t port = 0;
};

// "HOST:PORT", with brackets around a host that holds a colon (an IPv6 address).
std::string formatTcpContact(std::string_view host, std::uint16_t port);
// The host and port of a contact formatTcpContact wrote (InvalidGeometry, naming it, for anything else).
tl::expected<TcpContact, ChannelFailure> parseTcpContact(std::string_view contact);

// The host a sender on a bus reached through `busTransport` advertises: $WSYNC_PAYLOAD_HOST when set; for
// tcp://HOST:PORT the local address of this host's route to HOST (a connected UDP socket, which sends nothing);
// for ipc, whose coordinator is on this host, 127.0.0.1.
tl::expected<std::string, ChannelFailure> advertisedPayloadHost(std::string_view busTransport);

// The local address of this host's route to `host` (a name or an address): the source address the kernel picks for
// a connection there (a connected UDP socket, which sends nothing).
tl::expected<std::string, ChannelFailure> localAddressToward(const std::string& host);

}  // namespace wsync::bus
