#pragma once
// The messages the benchmark exchanges. The bus path builds them with MessageBuilder and takes them in through
// the bus library (which verifies every one); the raw path sends frames of exactly the same sizes, carrying only
// the number that pairs a reply with its request (no encoding, no verification).
//
//   round trip:  agent -> coordinator SnapshotRequest, coordinator -> agent SnapshotReply (the protocol's
//                request/reply pair of a late joiner); the reply's envelope seq is the request's.
//   fan-out:     coordinator -> agents Pause on "round/pause", each agent -> coordinator PauseAck of that round.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <wsync/bus/protocol/message.hpp>
#include <wsync/schemas/control_generated.h>

namespace wsync::bench {

// The coordinator's epoch in every message of the benchmark (nonzero, so every field is present and every
// message of a kind has the same size whatever its sequence number).
inline constexpr std::uint64_t kBenchEpoch = 1;
inline constexpr std::uint64_t kBenchVersion = 7;

std::span<const std::uint8_t> buildSnapshotRequest(bus::MessageBuilder& builder, std::uint64_t seq);
std::span<const std::uint8_t> buildSnapshotReply(bus::MessageBuilder& builder, std::uint64_t inReplyTo);
// The body only: EventPublisher::publish stamps and finishes it.
flatbuffers::Offset<msg::Pause> createPause(bus::MessageBuilder& builder, std::uint64_t round);
std::span<const std::uint8_t> buildPauseAck(bus::MessageBuilder& builder, std::uint64_t round);

// Sizes of the bus messages above, which the raw frames copy.
struct MessageSizes {
  std::size_t request = 0;
  std::size_t reply = 0;
  std::size_t pause = 0;
  std::size_t pauseAck = 0;
};
MessageSizes busMessageSizes();

// "round/pause": the topic of a Pause event, for both paths.
const std::string& pauseTopic();

// Raw frames carry their pairing number in their first 8 bytes (every frame is at least that long).
void stampFrame(std::span<std::uint8_t> frame, std::uint64_t number);
std::uint64_t readStamp(std::span<const std::uint8_t> frame);

// Routing ids of the agents: "rt" for the round-trip agent; "f<measurement>-<index>" for the fan-out agents,
// unique per fan-out measurement, because a ROUTER refuses a new peer whose routing id still belongs to a
// connection it has not yet seen close (an agent of the previous measurement).
inline constexpr std::string_view kRoundTripAgentId = "rt";
std::string pauseAgentId(std::size_t measurement, std::size_t index);
std::optional<std::size_t> pauseAgentIndex(std::string_view agentId);

}  // namespace wsync::bench
