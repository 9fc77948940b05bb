#pragma once
// Limits and constants of the control protocol, shared by every role.
#include <cstddef>
#include <cstdint>

namespace wsync::bus {

// Bumped only for a change that append-only schema evolution cannot express (schemas/control.fbs); why each one
// was, docs/decisions.md. 2: an operator's pause is OperatorPause / OperatorResume, no longer a Pause / Resume of
// round 0, which a worker of protocol 1 would have to understand to stay paused. 3: an agent on another host than
// the coordinator's reports its slot in SlotReport, which a coordinator of protocol 2 would drop (the agent would
// look dead), and mirrors the bus from the beat's pause fields. Also in 3, appended (no bump of their own): the
// tcp channel (ChannelKind Tcp), AgentHello channel_contacts and TransferPlan sender_contact. 4: the nccl channel
// cuts a transfer's first and last buckets into smaller broadcasts (broadcast_slices.hpp); a rank of protocol 3
// would post broadcasts of other sizes, which NCCL does not check but mismatches. 5: the nccl channel cuts every
// bucket into slices of at most half a bucket (its staging buffers are that large, not a bucket): the same
// mismatch against a rank of protocol 4. 6: the nccl channel's slices run on across consecutive packed buckets
// (one stream of bytes, so a transfer's ramp ends on a slice of the first slice's size, not on its last bucket's
// rest): against a rank of protocol 5, the same mismatch.
inline constexpr std::uint16_t kProtocolVersion = 6;

// Largest control message accepted, enforced by ZMQ_MAXMSGSIZE and again by the decoder. The largest messages carry
// a manifest: DeepSeek-V3's 90,427 tensors take 9.1 MB, and Manifest::create refuses a manifest that would not fit
// (kMaxManifestMessageBytes), so anything bigger is an attack or a bug.
inline constexpr std::size_t kMaxMessageBytes = std::size_t{32} << 20;

// Verifier limits: our schema nests at most 4 deep (Envelope > BeginUpdate > Manifest > TensorInfo); the table
// budget covers two lists of kMaxTensors (250,000, manifest.hpp) tables, a table each (a BeginUpdate carrying a
// manifest and the source's holdings, a hello carrying a worker's local tensors and bound regions: region.hpp), and
// the tables around them in the message, while bounding the work a hostile buffer can cause. (It was 250,000 flat:
// a BeginUpdate with a manifest of the most tensors a manifest may have was refused, and its trainer waited.)
inline constexpr unsigned kMaxVerifierDepth = 16;
inline constexpr unsigned kMaxVerifierTables = 2 * 250'000 + 64;

// Longest address in a hello's channel contact: a DNS name (253 bytes) with brackets, a colon and a port.
inline constexpr std::size_t kMaxContactAddressBytes = 262;

// Longest agent id, in bytes; it is stored in the control block and used as the ZeroMQ routing id.
inline constexpr std::size_t kMaxAgentIdBytes = 63;

// Highest version a round may publish. Versions are increasing 64-bit integers, read by signed 64-bit consumers too
// (Python and torch int64, Java longs), and committed + 1 must never wrap to 0.
inline constexpr std::uint64_t kMaxVersion = (std::uint64_t{1} << 63) - 1;

// Longest free text a client may have logged or forwarded (a round's label, a refusal's detail, a goodbye's reason):
// enough for any explanation, and a hostile client cannot fill logs or every monitor's stream with megabytes.
inline constexpr std::size_t kMaxClientTextBytes = 1024;
// Longest round label: it travels in every Commit and commit event.
inline constexpr std::size_t kMaxLabelBytes = 256;

}  // namespace wsync::bus
