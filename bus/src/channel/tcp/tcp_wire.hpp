#pragma once
// The frames a tcp transfer exchanges around the payload (docs/tcp-channel.md, "Admission"), fixed-size and
// little-endian:
//
//   receiver -> sender  hello   magic, wire version, receiver index, transfer, payload bytes, token,
//                               source index, 4 bytes of zeroes,
//                               agent id (its length, then 64 bytes zero-padded)                           128 bytes
//   sender -> receiver  answer  magic, admission, refusal, agent id (as in the hello)                       88 bytes
//   sender -> receiver  the payload: the tensors' bytes in manifest order, or in a region round the segments
//                       the receiver takes from this source in its send order (payload_stream.hpp)
//   receiver -> sender  ack     magic, bytes received                                                       16 bytes
//
// The agent ids say who is at each end, so that a fault names the agent rather than an address; each side's is its
// own claim, which only a holder of the round's token can make to the sender.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/protocol/protocol.hpp"

namespace wsync::bus::tcp {

inline constexpr std::uint64_t kWireMagic = 0x315054434e595357ULL;  // "WSYNCTP1" read little-endian
// Bumped when a frame changes: a receiver of another version is refused (WireVersion), once its first 12 bytes say
// which it speaks. 2: the agent ids. 3: the source index (region rounds).
inline constexpr std::uint32_t kWireVersion = 3;

// Bytes of an agent id's field: room for the longest id (kMaxAgentIdBytes).
inline constexpr std::size_t kAgentIdField = 64;
static_assert(kMaxAgentIdBytes < kAgentIdField);

// The start of every hello, whatever its version: magic and wire version.
inline constexpr std::size_t kHelloPrefixBytes = 12;
inline constexpr std::size_t kHelloBytes = 64 + kAgentIdField;
inline constexpr std::size_t kAnswerBytes = 24 + kAgentIdField;
inline constexpr std::size_t kAckBytes = 16;

using AdmissionToken = std::array<std::uint8_t, kTcpTokenBytes>;

struct ReceiverHello {
  std::uint32_t receiver = 0;
  std::uint64_t transfer = 0;
  std::uint64_t payloadBytes = 0;  // what the receiver expects: a sender that moves another count refuses it
  AdmissionToken token{};
  // The source the receiver means to reach (0 in a round of one sender): a contact list that points it at another
  // source is refused by name, rather than found by the digests after the bytes moved.
  std::uint32_t source = 0;
  std::string agentId;  // empty: unnamed (a test's or a tool's channel)
};

enum class Admission : std::uint32_t {
  Admitted = 1,  // the payload follows
  Later = 2,     // the sender is still on an earlier transfer: connect again
  Refused = 3,   // see Refusal; the connection closes
};

enum class Refusal : std::uint32_t {
  None = 0,
  Token = 1,
  Receiver = 2,
  PayloadBytes = 3,
  Stale = 4,
  WireVersion = 5,
  AgentId = 6,
  Source = 7,
};

struct SenderAnswer {
  Admission admission = Admission::Refused;
  Refusal refusal = Refusal::None;
  std::string agentId;  // the sender's; empty when it gave none that names an agent
};

// What the first kHelloPrefixBytes of a connection say: nothing when they are not a wsync tcp hello (a stranger,
// whose connection is dropped unanswered), else the wire version the peer speaks.
std::optional<std::uint32_t> helloWireVersion(std::span<const std::byte, kHelloPrefixBytes> prefix);

std::array<std::byte, kHelloBytes> encode(const ReceiverHello& hello);
// A hello of this wire version (helloWireVersion said so); nothing when its agent id's length is out of range.
// Whether the id names an agent (checkAgentId) is the sender's to check, after the token.
std::optional<ReceiverHello> decodeHello(std::span<const std::byte, kHelloBytes> bytes);

std::array<std::byte, kAnswerBytes> encode(const SenderAnswer& answer);
// Nothing when the bytes are not an answer. A sender's agent id that names no agent is left out (it is only named).
std::optional<SenderAnswer> decodeAnswer(std::span<const std::byte, kAnswerBytes> bytes);

std::array<std::byte, kAckBytes> encodeAck(std::uint64_t bytes);
std::optional<std::uint64_t> decodeAck(std::span<const std::byte, kAckBytes> bytes);

// Why a sender refused, for the receiver's error.
const char* describe(Refusal refusal);

}  // namespace wsync::bus::tcp
