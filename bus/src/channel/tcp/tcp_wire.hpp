#pragma once
// The frames a tcp transfer exchanges around the payload (docs/tcp-channel.md, "Admission"), fixed-size and
// little-endian:
//
//   receiver -> sender  hello   magic, wire version, receiver index, transfer, payload bytes, token    48 bytes
//   sender -> receiver  answer  magic, admission, refusal                                             16 bytes
//   sender -> receiver  the payload: the tensors' bytes in manifest order (payload_stream.hpp)
//   receiver -> sender  ack     magic, bytes received                                                 16 bytes
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wsync/bus/channel/tcp/tcp_channel.hpp"

namespace wsync::bus::tcp {

inline constexpr std::uint64_t kWireMagic = 0x315054434e595357ULL;  // "WSYNCTP1" read little-endian
// Bumped when a frame changes: a peer of another version is a stranger (its connection is dropped).
inline constexpr std::uint32_t kWireVersion = 1;

inline constexpr std::size_t kHelloBytes = 48;
inline constexpr std::size_t kAnswerBytes = 16;
inline constexpr std::size_t kAckBytes = 16;

using AdmissionToken = std::array<std::uint8_t, kTcpTokenBytes>;

struct ReceiverHello {
  std::uint32_t receiver = 0;
  std::uint64_t transfer = 0;
  std::uint64_t payloadBytes = 0;  // what the receiver expects: a sender that moves another count refuses it
  AdmissionToken token{};
};

enum class Admission : std::uint32_t {
  Admitted = 1,  // the payload follows
  Later = 2,     // the sender is still on an earlier transfer: connect again
  Refused = 3,   // see Refusal; the connection closes
};

enum class Refusal : std::uint32_t { None = 0, Token = 1, Receiver = 2, PayloadBytes = 3, Stale = 4 };

struct SenderAnswer {
  Admission admission = Admission::Refused;
  Refusal refusal = Refusal::None;
};

std::array<std::byte, kHelloBytes> encode(const ReceiverHello& hello);
// Nothing when the bytes are not a hello of this wire version: a stranger, whose connection is dropped unanswered.
std::optional<ReceiverHello> decodeHello(std::span<const std::byte, kHelloBytes> bytes);

std::array<std::byte, kAnswerBytes> encode(const SenderAnswer& answer);
std::optional<SenderAnswer> decodeAnswer(std::span<const std::byte, kAnswerBytes> bytes);

std::array<std::byte, kAckBytes> encodeAck(std::uint64_t bytes);
std::optional<std::uint64_t> decodeAck(std::span<const std::byte, kAckBytes> bytes);

// Why a sender refused, for the receiver's error.
const char* describe(Refusal refusal);

}  // namespace wsync::bus::tcp
