#include "channel/tcp/tcp_wire.hpp"

#include <algorithm>
#include <cstring>

#include "wsync/bus/protocol/client_text.hpp"

namespace wsync::bus::tcp {
namespace {

template <typename Unsigned>
void put(std::byte* at, Unsigned value) {
  for (std::size_t index = 0; index < sizeof(Unsigned); ++index) {
    at[index] = static_cast<std::byte>((value >> (8 * index)) & 0xff);
  }
}

template <typename Unsigned>
Unsigned get(const std::byte* at) {
  Unsigned value = 0;
  for (std::size_t index = 0; index < sizeof(Unsigned); ++index) {
    value |= static_cast<Unsigned>(std::to_integer<std::uint8_t>(at[index])) << (8 * index);
  }
  return value;
}

// An agent id's field: its length, 4 bytes of zeroes, then the id padded with zeroes. Longer ids are cut (no agent
// has one: checkAgentId bounds them).
void putAgentId(std::byte* at, const std::string& agentId) {
  const std::size_t length = std::min(agentId.size(), kMaxAgentIdBytes);
  put(at, static_cast<std::uint32_t>(length));
  std::memcpy(at + 8, agentId.data(), length);
}

// The id in a field, or nothing when its length is out of range; whether it names an agent is the caller's check.
std::optional<std::string> getAgentId(const std::byte* at) {
  const auto length = get<std::uint32_t>(at);
  if (length > kMaxAgentIdBytes) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(at + 8), length);
}

}  // namespace

std::optional<std::uint32_t> helloWireVersion(std::span<const std::byte, kHelloPrefixBytes> prefix) {
  if (get<std::uint64_t>(prefix.data()) != kWireMagic) return std::nullopt;
  return get<std::uint32_t>(prefix.data() + 8);
}

std::array<std::byte, kHelloBytes> encode(const ReceiverHello& hello) {
  std::array<std::byte, kHelloBytes> bytes{};
  put(bytes.data(), kWireMagic);
  put(bytes.data() + 8, kWireVersion);
  put(bytes.data() + 12, hello.receiver);
  put(bytes.data() + 16, hello.transfer);
  put(bytes.data() + 24, hello.payloadBytes);
  std::memcpy(bytes.data() + 32, hello.token.data(), hello.token.size());
  put(bytes.data() + 48, hello.source);
  putAgentId(bytes.data() + 56, hello.agentId);
  return bytes;
}

std::optional<ReceiverHello> decodeHello(std::span<const std::byte, kHelloBytes> bytes) {
  ReceiverHello hello;
  hello.receiver = get<std::uint32_t>(bytes.data() + 12);
  hello.transfer = get<std::uint64_t>(bytes.data() + 16);
  hello.payloadBytes = get<std::uint64_t>(bytes.data() + 24);
  std::memcpy(hello.token.data(), bytes.data() + 32, hello.token.size());
  hello.source = get<std::uint32_t>(bytes.data() + 48);
  auto agentId = getAgentId(bytes.data() + 56);
  if (!agentId) return std::nullopt;
  hello.agentId = std::move(*agentId);
  return hello;
}

std::array<std::byte, kAnswerBytes> encode(const SenderAnswer& answer) {
  std::array<std::byte, kAnswerBytes> bytes{};
  put(bytes.data(), kWireMagic);
  put(bytes.data() + 8, static_cast<std::uint32_t>(answer.admission));
  put(bytes.data() + 12, static_cast<std::uint32_t>(answer.refusal));
  putAgentId(bytes.data() + 16, answer.agentId);
  return bytes;
}

std::optional<SenderAnswer> decodeAnswer(std::span<const std::byte, kAnswerBytes> bytes) {
  if (get<std::uint64_t>(bytes.data()) != kWireMagic) return std::nullopt;
  const auto admission = get<std::uint32_t>(bytes.data() + 8);
  const auto refusal = get<std::uint32_t>(bytes.data() + 12);
  if (admission < 1 || admission > 3 || refusal > static_cast<std::uint32_t>(Refusal::Source)) return std::nullopt;
  SenderAnswer answer{static_cast<Admission>(admission), static_cast<Refusal>(refusal), {}};
  if (auto agentId = getAgentId(bytes.data() + 16); agentId && checkAgentId(*agentId).empty()) {
    answer.agentId = std::move(*agentId);
  }
  return answer;
}

std::array<std::byte, kAckBytes> encodeAck(std::uint64_t received) {
  std::array<std::byte, kAckBytes> bytes{};
  put(bytes.data(), kWireMagic);
  put(bytes.data() + 8, received);
  return bytes;
}

std::optional<std::uint64_t> decodeAck(std::span<const std::byte, kAckBytes> bytes) {
  if (get<std::uint64_t>(bytes.data()) != kWireMagic) return std::nullopt;
  return get<std::uint64_t>(bytes.data() + 8);
}

const char* describe(Refusal refusal) {
  switch (refusal) {
    case Refusal::None:
      return "no reason given";
    case Refusal::Token:
      return "its token is not the round's";
    case Refusal::Receiver:
      return "its receiver index is out of range or taken by another connection";
    case Refusal::PayloadBytes:
      return "it expects another number of payload bytes than the sender moves";
    case Refusal::Stale:
      return "it asked for a transfer the sender has finished";
    case Refusal::WireVersion:
      return "it speaks another version of the tcp channel's frames than the sender";
    case Refusal::AgentId:
      return "its agent id names no agent";
    case Refusal::Source:
      return "it asked for another source of the round, or takes nothing from this one";
  }
  return "an unknown reason";
}

}  // namespace wsync::bus::tcp
