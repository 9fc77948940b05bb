#include "channel/tcp/tcp_wire.hpp"

#include <cstring>

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

}  // namespace

std::array<std::byte, kHelloBytes> encode(const ReceiverHello& hello) {
  std::array<std::byte, kHelloBytes> bytes{};
  put(bytes.data(), kWireMagic);
  put(bytes.data() + 8, kWireVersion);
  put(bytes.data() + 12, hello.receiver);
  put(bytes.data() + 16, hello.transfer);
  put(bytes.data() + 24, hello.payloadBytes);
  std::memcpy(bytes.data() + 32, hello.token.data(), hello.token.size());
  return bytes;
}

std::optional<ReceiverHello> decodeHello(std::span<const std::byte, kHelloBytes> bytes) {
  if (get<std::uint64_t>(bytes.data()) != kWireMagic || get<std::uint32_t>(bytes.data() + 8) != kWireVersion) {
    return std::nullopt;
  }
  ReceiverHello hello;
  hello.receiver = get<std::uint32_t>(bytes.data() + 12);
  hello.transfer = get<std::uint64_t>(bytes.data() + 16);
  hello.payloadBytes = get<std::uint64_t>(bytes.data() + 24);
  std::memcpy(hello.token.data(), bytes.data() + 32, hello.token.size());
  return hello;
}

std::array<std::byte, kAnswerBytes> encode(const SenderAnswer& answer) {
  std::array<std::byte, kAnswerBytes> bytes{};
  put(bytes.data(), kWireMagic);
  put(bytes.data() + 8, static_cast<std::uint32_t>(answer.admission));
  put(bytes.data() + 12, static_cast<std::uint32_t>(answer.refusal));
  return bytes;
}

std::optional<SenderAnswer> decodeAnswer(std::span<const std::byte, kAnswerBytes> bytes) {
  if (get<std::uint64_t>(bytes.data()) != kWireMagic) return std::nullopt;
  const auto admission = get<std::uint32_t>(bytes.data() + 8);
  const auto refusal = get<std::uint32_t>(bytes.data() + 12);
  if (admission < 1 || admission > 3 || refusal > 4) return std::nullopt;
  return SenderAnswer{static_cast<Admission>(admission), static_cast<Refusal>(refusal)};
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
    case Refusal::None: return "no reason given";
    case Refusal::Token: return "its token is not the round's";
    case Refusal::Receiver: return "its receiver index is out of range or taken by another connection";
    case Refusal::PayloadBytes: return "it expects another number of payload bytes than the sender moves";
    case Refusal::Stale: return "it asked for a transfer the sender has finished";
  }
  return "an unknown reason";
}

}  // namespace wsync::bus::tcp
