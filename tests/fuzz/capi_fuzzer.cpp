// Fuzz target: what crosses the C API's boundary (capi/src/boundary.*), as a caller writes it: tensor descriptions
// (names of any bytes, dtype, ndim, shape, bytes, NULL pointers) and a worker's config (struct_size, bus, transport,
// agent id). Whatever the bytes:
//  - each tensor is accepted or refused with a text naming it by index; an accepted one has a name
//    validateTensorName() takes, a known dtype, at most kMaxTensorRank non-negative dimensions, a byte count that fits
//    and equals `bytes`, and data unless it is empty; a set of accepted ones with distinct names is a manifest
//    (Manifest::create) of those byte counts;
//  - wsync_worker_start never gets past the boundary with a tensor the checks above refuse, answers a status of the
//    header with a text, and never reads a shape entry past ndim (the array holds exactly that many: ASan sees more);
//  - of accepted tensors with distinct names, those whose memory shares a byte with an earlier one's are refused,
//    the first such named with one of the earlier ones it overlaps, and no others are refused for their memory.
// The worker's bus has no coordinator (a runtime folder of this process's own), so a start that passes the boundary
// ends in registration after 1 ms (capi_fuzz_input.hpp: CallerView).
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "boundary.hpp"
#include "capi_fuzz_input.hpp"
#include "fuzz_check.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/wsync.h"

namespace {

namespace bus = wsync::bus;
namespace capi = wsync::capi;
namespace fuzz = wsync::fuzz;

// Where this process's buses would live: never a real one, so that no coordinator answers. Removed at exit.
char runtimeFolder[] = "/tmp/wsync-fuzz-capi.XXXXXX";
bool useOwnRuntimeDirectory() {
  WSYNC_FUZZ_CHECK(::mkdtemp(runtimeFolder) != nullptr);
  WSYNC_FUZZ_CHECK(::setenv("WSYNC_RUNTIME_DIR", runtimeFolder, 1) == 0);
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(runtimeFolder, ignored);
  });
  return true;
}

bool startsWith(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// Whether two tensors' memory shares a byte, computed pair by pair: the oracle for the bindings' ordered check.
bool overlap(const wsync_tensor& a, const wsync_tensor& b) {
  if (a.bytes == 0 || b.bytes == 0) return false;
  const auto aFirst = reinterpret_cast<std::uintptr_t>(a.data);
  const auto bFirst = reinterpret_cast<std::uintptr_t>(b.data);
  return aFirst < bFirst + b.bytes && bFirst < aFirst + a.bytes;
}

// The checks of one tensor; true when the boundary accepted it, with its byte count.
bool checkTensor(const wsync_tensor& tensor, std::size_t index, bus::TensorSpec& spec, std::uint64_t& bytes) {
  auto accepted = capi::tensorSpecOf(tensor, index);
  if (!accepted) {
    WSYNC_FUZZ_CHECK(startsWith(accepted.error(), "tensor " + std::to_string(index)));
    return false;
  }
  spec = std::move(*accepted);
  WSYNC_FUZZ_CHECK(tensor.name != nullptr && spec.name == tensor.name);
  WSYNC_FUZZ_CHECK(bus::validateTensorName(spec.name).has_value());
  WSYNC_FUZZ_CHECK(static_cast<std::uint8_t>(spec.dtype) == tensor.dtype && bus::elementBytes(spec.dtype) > 0);
  WSYNC_FUZZ_CHECK(spec.shape.size() == tensor.ndim && tensor.ndim <= bus::kMaxTensorRank);
  std::uint64_t expected = bus::elementBytes(spec.dtype);
  for (std::size_t at = 0; at < spec.shape.size(); ++at) {
    WSYNC_FUZZ_CHECK(spec.shape[at] == tensor.shape[at] && spec.shape[at] >= 0);
    WSYNC_FUZZ_CHECK(!__builtin_mul_overflow(expected, static_cast<std::uint64_t>(spec.shape[at]), &expected));
  }
  WSYNC_FUZZ_CHECK(expected <= bus::kMaxManifestBytes);
  auto span = capi::tensorMemoryOf(tensor, spec, index);
  if (!span) {
    WSYNC_FUZZ_CHECK(startsWith(span.error(), "tensor " + std::to_string(index)));
    WSYNC_FUZZ_CHECK(tensor.bytes != expected || (tensor.data == nullptr && expected > 0));
    return false;
  }
  WSYNC_FUZZ_CHECK(span->size() == expected && tensor.bytes == expected);
  WSYNC_FUZZ_CHECK(span->data() == tensor.data);
  bytes = expected;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool isolated = useOwnRuntimeDirectory();
  (void)isolated;
  const fuzz::FuzzCase input = fuzz::readFuzzCase(data, size);

  const fuzz::CallerView caller(input);
  const std::vector<wsync_tensor>& tensors = caller.tensors;
  WSYNC_FUZZ_CHECK(capi::tensorArrayOf(tensors.data(), tensors.size()).has_value());
  bool allAccepted = true;
  std::vector<bus::TensorSpec> specs;
  std::vector<std::uint64_t> bytes;
  std::set<std::string> names;
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    bus::TensorSpec spec;
    std::uint64_t tensorBytes = 0;
    if (!checkTensor(tensors[index], index, spec, tensorBytes)) {
      allAccepted = false;
      continue;
    }
    names.insert(spec.name);
    specs.push_back(std::move(spec));
    bytes.push_back(tensorBytes);
  }
  if (!specs.empty() && names.size() == specs.size()) {
    const auto manifest = bus::Manifest::create(specs);
    if (manifest) {
      for (std::size_t index = 0; index < specs.size(); ++index) {
        WSYNC_FUZZ_CHECK(manifest->tensorBytes(index) == bytes[index]);
      }
    } else {
      WSYNC_FUZZ_CHECK(manifest.error().code == bus::ManifestError::TooLarge);  // their sum, past kMaxManifestBytes
    }
  }

  // Accepted, distinctly named tensors that share memory: the first that does, and the earlier ones it overlaps.
  std::size_t firstOverlapping = tensors.size();
  std::vector<std::string> overlapped;
  if (allAccepted && names.size() == specs.size()) {
    for (std::size_t later = 1; later < tensors.size() && overlapped.empty(); ++later) {
      for (std::size_t earlier = 0; earlier < later; ++earlier) {
        if (overlap(tensors[earlier], tensors[later])) overlapped.push_back(specs[earlier].name);
      }
      if (!overlapped.empty()) firstOverlapping = later;
    }
  }

  // The same through the header, with the config's texts and struct_size.
  const wsync_status status = caller.start();
  const std::string text = wsync_last_error();
  WSYNC_FUZZ_CHECK(std::string(wsync_status_name(status)) != "unknown");
  WSYNC_FUZZ_CHECK(status == WSYNC_OK || !text.empty());
  if (status != WSYNC_INVALID_ARGUMENT) WSYNC_FUZZ_CHECK(allAccepted && !tensors.empty());
  if (allAccepted && names.size() == specs.size()) {
    // A text of the tensors' loop can only be a refusal of memory: every tensor passed the boundary's checks.
    const bool tensorRefused = startsWith(text, "tensor ");
    if (firstOverlapping == tensors.size()) {
      WSYNC_FUZZ_CHECK(!tensorRefused);
    } else {
      WSYNC_FUZZ_CHECK(status == WSYNC_INVALID_ARGUMENT);
      if (tensorRefused) {
        const std::string& name = specs[firstOverlapping].name;
        WSYNC_FUZZ_CHECK(
            startsWith(text, "tensor " + std::to_string(firstOverlapping) + ": tensor '" + name + "': memory [0x"));
        bool namesOne = false;
        for (const std::string& other : overlapped) {
          namesOne = namesOne || text.find("overlaps that of tensor '" + other + "' [0x") != std::string::npos;
        }
        WSYNC_FUZZ_CHECK(namesOne);
      }
    }
  }
  return 0;
}
