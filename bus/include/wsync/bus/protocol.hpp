#pragma once
// Limits and constants of the control protocol, shared by every role.
#include <cstddef>
#include <cstdint>

namespace wsync::bus {

// Bumped only for a change that append-only schema evolution cannot express (schemas/control.fbs).
inline constexpr std::uint16_t kProtocolVersion = 1;

// Largest control message accepted, enforced by ZMQ_MAXMSGSIZE and again by the decoder. A manifest of 100,000
// tensors with long names is about 15 MiB; anything bigger is an attack or a bug.
inline constexpr std::size_t kMaxMessageBytes = std::size_t{32} << 20;

// Verifier limits: our schema nests at most 4 deep (Envelope > BeginUpdate > Manifest > TensorInfo); the table
// budget covers a manifest of 250,000 tensors while bounding the work a hostile buffer can cause.
inline constexpr unsigned kMaxVerifierDepth = 16;
inline constexpr unsigned kMaxVerifierTables = 250'000;

// Longest agent id, in bytes; it is stored in the control block and used as the ZeroMQ routing id.
inline constexpr std::size_t kMaxAgentIdBytes = 63;

}  // namespace wsync::bus
