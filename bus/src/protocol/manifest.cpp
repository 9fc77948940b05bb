#include "wsync/bus/protocol/manifest.hpp"

#include <bit>
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {
namespace {

std::string quoted(std::string_view name) { return "tensor '" + std::string(name) + "'"; }

std::string shapeText(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return text + "]";
}

// Bytes of one tensor, or the reason it has none.
tl::expected<std::uint64_t, ManifestFailure> bytesOf(const TensorSpec& tensor) {
  if (auto valid = validateTensorName(tensor.name); !valid) return tl::unexpected(std::move(valid.error()));
  const std::size_t element = elementBytes(tensor.dtype);
  if (element == 0) {
    return fail(ManifestError::UnknownDType, quoted(tensor.name) + " has dtype " +
                                                 std::to_string(static_cast<int>(tensor.dtype)) +
                                                 ", which this build does not know");
  }
  if (tensor.shape.size() > kMaxTensorRank) {
    return fail(ManifestError::RankTooLarge, quoted(tensor.name) + " has " + std::to_string(tensor.shape.size()) +
                                                 " dimensions, at most " + std::to_string(kMaxTensorRank));
  }
  std::uint64_t bytes = element;
  for (std::int64_t dim : tensor.shape) {
    if (dim < 0) {
      return fail(ManifestError::NegativeDimension, quoted(tensor.name) + " has shape " + shapeText(tensor.shape));
    }
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(dim), &bytes) || bytes > kMaxManifestBytes) {
      return fail(ManifestError::TooLarge, quoted(tensor.name) + " of shape " + shapeText(tensor.shape) +
                                               " is larger than " + std::to_string(kMaxManifestBytes) + " bytes");
    }
  }
  return bytes;
}

// An upper bound on what toMessage writes, from the names and ranks alone, so that create() encodes a manifest to
// measure it only when it may be near the limit. Per tensor: its table (16 bytes) and vtable (12, which FlatBuffers
// shares between equal ones), its offset in the vector (4), the name (a length, the bytes, a NUL and padding to 4:
// at most its bytes + 8) and the shape (a length and padding to 8, then 8 per dimension). Around them, the
// Manifest table with its digest and total, and the vector's length.
constexpr std::uint64_t kEntryBoundBytes = 16 + 12 + 4 + 8 + 8;
constexpr std::uint64_t kManifestTableBoundBytes = 128;

std::uint64_t entryBoundBytes(const TensorSpec& tensor) {
  return kEntryBoundBytes + tensor.name.size() + 8 * tensor.shape.size();
}

}  // namespace

// The digest covers what a worker checks its bindings against: names, dtypes and shapes, in order, each field
// length-prefixed so that no two different manifests hash the same byte stream.
Digest digestOf(const std::vector<TensorSpec>& tensors) {
  StreamDigest stream;
  auto add = [&](const void* data, std::size_t size) { stream.add(data, size); };
  const std::uint64_t count = tensors.size();
  add(&count, sizeof(count));
  for (const TensorSpec& tensor : tensors) {
    const std::uint64_t nameBytes = tensor.name.size();
    add(&nameBytes, sizeof(nameBytes));
    add(tensor.name.data(), tensor.name.size());
    const auto dtype = static_cast<std::uint8_t>(tensor.dtype);
    add(&dtype, sizeof(dtype));
    const std::uint64_t rank = tensor.shape.size();
    add(&rank, sizeof(rank));
    add(tensor.shape.data(), tensor.shape.size() * sizeof(std::int64_t));
  }
  return stream.digest();
}

tl::expected<void, ManifestFailure> validateTensorName(std::string_view name) {
  // Enough of an over-long name to recognise it in a log line.
  constexpr std::size_t kShownPrefixBytes = 64;
  if (name.empty()) return fail(ManifestError::InvalidName, "a tensor has an empty name");
  if (name.size() > kMaxTensorNameBytes) {
    return fail(ManifestError::InvalidName, quoted(printableText(name, kShownPrefixBytes)) + " has a name of " +
                                                std::to_string(name.size()) + " bytes, over " +
                                                std::to_string(kMaxTensorNameBytes));
  }
  // Named apart from other control bytes: a NUL is the one a C-string API silently cuts at.
  if (const std::size_t nul = name.find('\0'); nul != std::string_view::npos) {
    return fail(ManifestError::InvalidName,
                quoted(printableText(name)) + " has a NUL byte at offset " + std::to_string(nul));
  }
  if (std::string why = checkClientText("tensor", name, kMaxTensorNameBytes); !why.empty()) {
    return fail(ManifestError::InvalidName, std::move(why));
  }
  return {};
}

std::string_view toString(ManifestError error) {
  switch (error) {
    case ManifestError::Empty:
      return "empty manifest";
    case ManifestError::TooManyTensors:
      return "too many tensors";
    case ManifestError::InvalidName:
      return "invalid tensor name";
    case ManifestError::DuplicateName:
      return "duplicate tensor name";
    case ManifestError::UnknownDType:
      return "unknown dtype";
    case ManifestError::RankTooLarge:
      return "too many dimensions";
    case ManifestError::NegativeDimension:
      return "negative dimension";
    case ManifestError::TooLarge:
      return "manifest too large";
    case ManifestError::DigestMismatch:
      return "manifest digest mismatch";
    case ManifestError::InvalidPlan:
      return "invalid bucket plan";
    case ManifestError::MessageTooLarge:
      return "manifest too large for a control message";
  }
  return "unknown manifest error";
}

tl::expected<Manifest, ManifestFailure> Manifest::create(std::vector<TensorSpec> tensors) {
  if (tensors.empty()) return fail(ManifestError::Empty, "a manifest needs at least one tensor");
  if (tensors.size() > kMaxTensors) {
    return fail(ManifestError::TooManyTensors,
                std::to_string(tensors.size()) + " tensors, at most " + std::to_string(kMaxTensors));
  }
  std::vector<std::uint64_t> bytes;
  bytes.reserve(tensors.size());
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  std::uint64_t total = 0;
  std::uint64_t encodedBound = kManifestTableBoundBytes;
  for (const TensorSpec& tensor : tensors) {
    encodedBound += entryBoundBytes(tensor);
    auto tensorBytes = bytesOf(tensor);
    if (!tensorBytes) return tl::unexpected(tensorBytes.error());
    if (!names.insert(tensor.name).second) {
      return fail(ManifestError::DuplicateName, quoted(tensor.name) + " appears twice");
    }
    total += *tensorBytes;  // each term is at most kMaxManifestBytes, so the check below sees any excess first
    if (total > kMaxManifestBytes) {
      return fail(ManifestError::TooLarge, "the tensors up to " + quoted(tensor.name) + " exceed " +
                                               std::to_string(kMaxManifestBytes) + " bytes");
    }
    bytes.push_back(*tensorBytes);
  }
  const Digest digest = digestOf(tensors);
  Manifest manifest(std::move(tensors), std::move(bytes), total, digest);
  if (encodedBound > kMaxManifestMessageBytes) {
    // Near the limit: measured exactly, by encoding it as a BeginUpdate would.
    flatbuffers::FlatBufferBuilder fbb(encodedBound);
    fbb.Finish(manifest.toMessage(fbb));
    if (fbb.GetSize() > kMaxManifestMessageBytes) {
      std::uint64_t nameBytes = 0;
      const TensorSpec* longest = &manifest.tensors_.front();
      for (const TensorSpec& tensor : manifest.tensors_) {
        nameBytes += tensor.name.size();
        if (tensor.name.size() > longest->name.size()) longest = &tensor;
      }
      return fail(ManifestError::MessageTooLarge,
                  std::to_string(manifest.size()) + " tensors encode to " + std::to_string(fbb.GetSize()) +
                      " bytes, over the " + std::to_string(kMaxManifestMessageBytes) +
                      " a manifest may take in one control message; their names take " + std::to_string(nameBytes) +
                      " bytes, the longest " + quoted(printableText(longest->name, 64)) + " " +
                      std::to_string(longest->name.size()));
    }
  }
  return manifest;
}

static_assert(std::endian::native == std::endian::little, "shapes are copied from FlatBuffers' little-endian bytes");

tl::expected<Manifest, ManifestFailure> Manifest::fromMessage(const msg::Manifest& message) {
  std::vector<TensorSpec> tensors;
  if (const auto* entries = message.tensors()) {
    if (entries->size() > kMaxTensors) {
      return fail(ManifestError::TooManyTensors, std::to_string(entries->size()) + " tensors");
    }
    tensors.reserve(entries->size());
    for (const msg::TensorInfo* entry : *entries) {
      TensorSpec tensor{entry->name()->str(), entry->dtype(), {}};
      if (const auto* shape = entry->shape()) {
        // Copied as bytes, not read element by element: the Verifier does not check a vector's elements are
        // aligned (google/flatbuffers#8397), and a hostile [long] 4 bytes off would be a misaligned read. Message
        // decoding refuses such buffers too; this keeps fromMessage safe on any verified table. FlatBuffers
        // stores little-endian, as the hosts we build for are.
        tensor.shape.resize(shape->size());
        if (!tensor.shape.empty()) {
          std::memcpy(tensor.shape.data(), shape->Data(), shape->size() * sizeof(std::int64_t));
        }
      }
      tensors.push_back(std::move(tensor));
    }
  }
  auto manifest = create(std::move(tensors));
  if (!manifest) return manifest;
  const Digest claimed = message.digest() != nullptr ? bus::fromMessage(*message.digest()) : Digest{};
  if (claimed != manifest->digest()) {
    return fail(ManifestError::DigestMismatch, "the manifest's tensors do not hash to the digest sent with them");
  }
  return manifest;
}

flatbuffers::Offset<msg::Manifest> Manifest::toMessage(flatbuffers::FlatBufferBuilder& fbb) const {
  std::vector<flatbuffers::Offset<msg::TensorInfo>> entries;
  entries.reserve(tensors_.size());
  for (const TensorSpec& tensor : tensors_) {
    // With its length, not as a C string: the wire form must hold exactly the bytes the digest covers.
    const auto name = fbb.CreateString(tensor.name);
    const auto shape = fbb.CreateVector(tensor.shape);
    entries.push_back(msg::CreateTensorInfo(fbb, name, tensor.dtype, shape));
  }
  const msg::Digest128 digest = bus::toMessage(digest_);
  return msg::CreateManifestDirect(fbb, &digest, &entries, totalBytes_);
}

std::string hex(const Digest& digest) { return hex128(digest.hi, digest.lo); }

}  // namespace wsync::bus
