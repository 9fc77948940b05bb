#pragma once
// What the demo checks at the end: that a worker holds exactly the trainer's bytes of the last version, and that
// every output a worker produced carries consistent version spans.
#include <cstdint>
#include <set>
#include <string>

#include <tl/expected.hpp>

namespace wsync::demo {

// Compares two .safetensors dumps tensor by tensor (names, dtypes, shapes, bytes) and their "wsync_version"
// metadata; returns that version.
tl::expected<std::uint64_t, std::string> compareWeights(const std::string& expectedPath, const std::string& actualPath);

struct OutputSummary {
  std::uint64_t outputs = 0;
  std::uint64_t tokens = 0;
  std::uint64_t straddling = 0;  // outputs whose tokens came from more than one version
  std::uint64_t aborted = 0;
  std::set<std::uint64_t> versions;
};

// Reads a worker's outputs (JSON lines {"request", "tokens", "aborted", "spans": [[first token, version], ...]})
// and checks every output's spans: the first starts at token 0, first tokens strictly increase and stay below the
// output's length, versions never decrease, and each is 0 (the initial weights) or one of `committed`.
tl::expected<OutputSummary, std::string> checkOutputs(const std::string& path,
                                                      const std::set<std::uint64_t>& committed);

}  // namespace wsync::demo
