#include "wsync/worker_agent/span_recorder.hpp"

#include <string>

namespace wsync::worker_agent {

void SpanRecorder::record(std::uint64_t tokenIndex, std::uint64_t version) {
  if (!spans_.empty() && spans_.back().version == version) return;
  spans_.push_back(VersionSpan{tokenIndex, version});
}

std::string_view toString(SpanError error) {
  switch (error) {
    case SpanError::FirstNotAtZero:
      return "first span does not start at token 0";
    case SpanError::TokensNotIncreasing:
      return "span starts are not increasing";
    case SpanError::VersionDecreasing:
      return "versions decrease";
    case SpanError::PastLastToken:
      return "span starts past the last token";
  }
  return "unknown span error";
}

tl::expected<void, SpanFailure> checkSpans(std::span<const VersionSpan> spans, std::uint64_t tokenCount) {
  auto describe = [&](std::size_t index) {
    return "span " + std::to_string(index) + " (token " + std::to_string(spans[index].firstToken) + ", version " +
           std::to_string(spans[index].version) + ")";
  };
  for (std::size_t index = 0; index < spans.size(); ++index) {
    const VersionSpan& span = spans[index];
    if (index == 0 && span.firstToken != 0) return bus::fail(SpanError::FirstNotAtZero, describe(index));
    if (index > 0 && span.firstToken <= spans[index - 1].firstToken) {
      return bus::fail(SpanError::TokensNotIncreasing, describe(index) + " after " + describe(index - 1));
    }
    if (index > 0 && span.version < spans[index - 1].version) {
      return bus::fail(SpanError::VersionDecreasing, describe(index) + " after " + describe(index - 1));
    }
    if (span.firstToken >= tokenCount) {
      return bus::fail(SpanError::PastLastToken,
                       describe(index) + " in an output of " + std::to_string(tokenCount) + " tokens");
    }
  }
  return {};
}

}  // namespace wsync::worker_agent
