#pragma once
// The ordered list of tensors a version consists of, with its digest. A trainer declares it; a worker checks every
// entry against its bindings before any byte moves; on the wire it is sent once and referenced by digest after.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest_error.hpp"
#include "wsync/bus/protocol/protocol.hpp"

namespace wsync::bus {

// Limits that keep a hostile manifest from costing unbounded memory or time; each far above real models
// (Qwen3-30B-A3B has 18,867 tensors, the longest names are under 100 bytes, ranks are at most 5).
inline constexpr std::size_t kMaxTensors = 250'000;
inline constexpr std::size_t kMaxTensorNameBytes = 1024;
inline constexpr std::size_t kMaxTensorRank = 16;
inline constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{1} << 46;  // 64 TiB

// A manifest travels in one control message (a BeginUpdate, then a Manifest to each worker), so its encoded form
// must leave room in kMaxMessageBytes for the envelope, the label and the round's numbers. Real names keep far
// inside: DeepSeek-V3's 90,427 tensors encode to 9.1 MB. Names near kMaxTensorNameBytes on 100,000 tensors do
// not, and Manifest::create refuses them (MessageTooLarge) rather than leaving the round to fail on the wire.
inline constexpr std::size_t kManifestMessageReserve = std::size_t{64} << 10;
inline constexpr std::size_t kMaxManifestMessageBytes = kMaxMessageBytes - kManifestMessageReserve;
// Every table a message carrying a manifest of kMaxTensors tensors holds, one per tensor and a few around them,
// must be within the verifier's budget, or the largest manifest allowed could not be sent.
static_assert(kMaxTensors + 16 <= kMaxVerifierTables, "the verifier's table budget must cover the largest manifest");

struct TensorSpec {
  std::string name;
  msg::DType dtype = msg::DType::Unknown;
  std::vector<std::int64_t> shape;

  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

struct Digest {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;

  friend bool operator==(const Digest&, const Digest&) = default;
};

// The digest as 32 hex digits, high word first: how logs, refusals and monitors show it.
std::string hex(const Digest& digest);

// Why `name` cannot name a tensor (InvalidName), or nothing: it must be 1 to kMaxTensorNameBytes bytes of
// well-formed UTF-8 without control characters (U+0000-U+001F, U+007F). Names end up in logs, JSON (wsync-mon) and
// safetensors headers, and an API that takes C strings would cut one at a NUL while the digest covers every byte.
// The one check for manifests (Manifest::create) and worker bindings alike; the detail shows the name with
// non-printable bytes as \xNN, so a log line never carries a raw control byte: "tensor 'a\x00b' has a NUL byte
// at offset 1".
tl::expected<void, ManifestFailure> validateTensorName(std::string_view name);

// A validated manifest: every tensor has a unique valid name (validateTensorName), a known dtype and a byte count
// that fits, and the whole encodes to at most kMaxManifestMessageBytes.
class Manifest {
 public:
  static tl::expected<Manifest, ManifestFailure> create(std::vector<TensorSpec> tensors);
  // From the wire: validated like create(), and the digest it carries must be the digest of its tensors.
  static tl::expected<Manifest, ManifestFailure> fromMessage(const msg::Manifest& message);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::size_t size() const { return tensors_.size(); }
  // Bytes of tensor `index`, and of all of them.
  std::uint64_t tensorBytes(std::size_t index) const { return tensorBytes_[index]; }
  std::uint64_t totalBytes() const { return totalBytes_; }
  // XXH3-128 of the ordered (name, dtype, shape) list: equal digests mean equal manifests.
  const Digest& digest() const { return digest_; }

  flatbuffers::Offset<msg::Manifest> toMessage(flatbuffers::FlatBufferBuilder& fbb) const;

 private:
  Manifest(std::vector<TensorSpec>&& tensors, std::vector<std::uint64_t>&& bytes, std::uint64_t total, Digest digest)
      : tensors_(std::move(tensors)), tensorBytes_(std::move(bytes)), totalBytes_(total), digest_(digest) {}

  std::vector<TensorSpec> tensors_;
  std::vector<std::uint64_t> tensorBytes_;
  std::uint64_t totalBytes_;
  Digest digest_;
};

// The digest of an ordered tensor list, the manifest's when the list is a valid one (Manifest::digest). For tools
// and tests that must state the digest of a list the manifest rules refuse (a hostile client's).
Digest digestOf(const std::vector<TensorSpec>& tensors);

inline msg::Digest128 toMessage(const Digest& digest) { return msg::Digest128(digest.lo, digest.hi); }
inline Digest fromMessage(const msg::Digest128& digest) { return Digest{digest.lo(), digest.hi()}; }

}  // namespace wsync::bus
