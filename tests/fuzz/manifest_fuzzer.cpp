// Fuzz target: manifests from the wire (Manifest::fromMessage). The input is a FlatBuffers buffer whose root is a
// Manifest table, checked by the Verifier with the limits every control message gets. Whatever the bytes, the
// decoder either refuses them with a named error or returns a manifest whose invariants hold: at least one tensor,
// unique names that validateTensorName() accepts, byte counts that are the product of shape and element size and
// add up to the total, and a message that round-trips (toMessage, fromMessage) to the same tensors and digest.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "fuzz_check.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/protocol.hpp"

namespace {

namespace bus = wsync::bus;
namespace msg = wsync::msg;

void checkValid(const bus::Manifest& manifest) {
  WSYNC_FUZZ_CHECK(manifest.size() >= 1 && manifest.size() <= bus::kMaxTensors);
  std::set<std::string> names;
  std::uint64_t total = 0;
  for (std::size_t index = 0; index < manifest.size(); ++index) {
    const bus::TensorSpec& tensor = manifest.tensors()[index];
    WSYNC_FUZZ_CHECK(!tensor.name.empty() && tensor.name.size() <= bus::kMaxTensorNameBytes);
    WSYNC_FUZZ_CHECK(bus::validateTensorName(tensor.name).has_value());
    WSYNC_FUZZ_CHECK(names.insert(tensor.name).second);
    WSYNC_FUZZ_CHECK(tensor.shape.size() <= bus::kMaxTensorRank);
    std::uint64_t bytes = bus::elementBytes(tensor.dtype);
    WSYNC_FUZZ_CHECK(bytes > 0);
    for (const std::int64_t dimension : tensor.shape) {
      WSYNC_FUZZ_CHECK(dimension >= 0);
      WSYNC_FUZZ_CHECK(!__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(dimension), &bytes));
    }
    WSYNC_FUZZ_CHECK(bytes == manifest.tensorBytes(index));
    total += bytes;
  }
  WSYNC_FUZZ_CHECK(total == manifest.totalBytes());
  WSYNC_FUZZ_CHECK(total <= bus::kMaxManifestBytes);

  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(manifest.toMessage(fbb));
  const auto again = bus::Manifest::fromMessage(*flatbuffers::GetRoot<msg::Manifest>(fbb.GetBufferPointer()));
  WSYNC_FUZZ_CHECK(again.has_value());
  WSYNC_FUZZ_CHECK(again->tensors() == manifest.tensors());
  WSYNC_FUZZ_CHECK(again->digest() == manifest.digest());
  const auto created = bus::Manifest::create(manifest.tensors());
  WSYNC_FUZZ_CHECK(created.has_value() && created->digest() == manifest.digest());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > bus::kMaxMessageBytes) return 0;
  const std::vector<std::uint8_t> aligned(data, data + size);  // operator new aligns it for every scalar
  flatbuffers::Verifier::Options options;
  options.max_depth = bus::kMaxVerifierDepth;
  options.max_tables = bus::kMaxVerifierTables;
  flatbuffers::Verifier verifier(aligned.data(), aligned.size(), options);
  if (!verifier.VerifyBuffer<msg::Manifest>(nullptr)) return 0;
  const auto manifest = bus::Manifest::fromMessage(*flatbuffers::GetRoot<msg::Manifest>(aligned.data()));
  if (!manifest) {
    WSYNC_FUZZ_CHECK(!manifest.error().describe().empty());
    WSYNC_FUZZ_CHECK(!toString(manifest.error().code).empty());
    return 0;
  }
  checkValid(*manifest);
  return 0;
}
