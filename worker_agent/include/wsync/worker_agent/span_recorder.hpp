#pragma once
// Which version produced which tokens of one output: a list of (first token index, version), one entry per run
// of tokens generated under the same applied version. An output that straddled an update has two or more.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/core/failure.hpp"

namespace wsync::worker_agent {

struct VersionSpan {
  std::uint64_t firstToken = 0;
  std::uint64_t version = 0;

  friend bool operator==(const VersionSpan&, const VersionSpan&) = default;
};

// Not thread-safe: one per output, written by the thread that generates it.
class SpanRecorder {
 public:
  // Token `tokenIndex` was generated under `version`; a new span starts only when the version differs from the
  // last one recorded. Tokens are expected in increasing order (checkSpans tells otherwise).
  void record(std::uint64_t tokenIndex, std::uint64_t version);
  const std::vector<VersionSpan>& spans() const { return spans_; }
  void clear() { spans_.clear(); }

 private:
  std::vector<VersionSpan> spans_;
};

enum class SpanError : std::uint8_t {
  FirstNotAtZero,       // the first span does not start at token 0
  TokensNotIncreasing,  // a span does not start after the previous one
  VersionDecreasing,    // a span carries a lower version than the one before it
  PastLastToken,        // a span starts at or after the output's token count
};

std::string_view toString(SpanError error);
using SpanFailure = bus::Failure<SpanError>;

// Whether `spans` can describe an output: the first starts at token 0, first-token indices strictly increase and
// versions never decrease; with `tokenCount`, every span also starts before it. No spans is consistent (an output
// that ended before its first token). The detail names the offending span by index.
tl::expected<void, SpanFailure> checkSpans(std::span<const VersionSpan> spans, std::uint64_t tokenCount = UINT64_MAX);

}  // namespace wsync::worker_agent
