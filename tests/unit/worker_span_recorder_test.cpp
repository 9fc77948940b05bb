// Span recording: a new span only when the version changes, and the consistency checker that the CLI and the
// end-to-end tests apply to every output, including each way a span list can be wrong.
#include <gtest/gtest.h>

#include "wsync/worker_agent/span_recorder.hpp"

namespace wsync::worker_agent {
namespace {

TEST(SpanRecorder, StartsASpanOnlyWhenTheVersionChanges) {
  SpanRecorder recorder;
  EXPECT_TRUE(recorder.spans().empty());
  for (std::uint64_t token = 0; token < 5; ++token) recorder.record(token, 3);
  for (std::uint64_t token = 5; token < 9; ++token) recorder.record(token, 4);
  recorder.record(9, 6);
  const std::vector<VersionSpan> expected{{0, 3}, {5, 4}, {9, 6}};
  EXPECT_EQ(recorder.spans(), expected);
  EXPECT_TRUE(checkSpans(recorder.spans(), 10).has_value());
  recorder.clear();
  EXPECT_TRUE(recorder.spans().empty());
}

TEST(SpanRecorder, VersionZeroIsAVersionLikeAnyOther) {
  SpanRecorder recorder;
  recorder.record(0, 0);
  recorder.record(1, 0);
  recorder.record(2, 1);
  const std::vector<VersionSpan> expected{{0, 0}, {2, 1}};
  EXPECT_EQ(recorder.spans(), expected);
}

TEST(CheckSpans, AcceptsEmptyAndSingleSpans) {
  EXPECT_TRUE(checkSpans({}).has_value());
  EXPECT_TRUE(checkSpans({}, 0).has_value());  // ended before its first token
  const std::vector<VersionSpan> one{{0, 7}};
  EXPECT_TRUE(checkSpans(one, 1).has_value());
  EXPECT_TRUE(checkSpans(one).has_value());
}

TEST(CheckSpans, AcceptsEqualVersionsInARow) {
  // Not what the recorder writes, but not wrong: the versions do not decrease.
  const std::vector<VersionSpan> spans{{0, 2}, {4, 2}, {6, 3}};
  EXPECT_TRUE(checkSpans(spans, 7).has_value());
}

TEST(CheckSpans, FirstSpanMustStartAtZero) {
  const std::vector<VersionSpan> spans{{1, 2}, {4, 3}};
  auto checked = checkSpans(spans);
  ASSERT_FALSE(checked.has_value());
  EXPECT_EQ(checked.error().code, SpanError::FirstNotAtZero);
  EXPECT_NE(checked.error().detail.find("span 0 (token 1, version 2)"), std::string::npos) << checked.error().detail;
}

TEST(CheckSpans, StartsMustStrictlyIncrease) {
  for (const std::uint64_t second : {0U, 3U}) {
    const std::vector<VersionSpan> spans{{0, 1}, {3, 2}, {second, 3}};
    auto checked = checkSpans(spans);
    ASSERT_FALSE(checked.has_value()) << second;
    EXPECT_EQ(checked.error().code, SpanError::TokensNotIncreasing);
    EXPECT_NE(checked.error().detail.find("span 2"), std::string::npos) << checked.error().detail;
  }
}

TEST(CheckSpans, VersionsMustNotDecrease) {
  const std::vector<VersionSpan> spans{{0, 5}, {3, 4}};
  auto checked = checkSpans(spans);
  ASSERT_FALSE(checked.has_value());
  EXPECT_EQ(checked.error().code, SpanError::VersionDecreasing);
  EXPECT_NE(checked.error().detail.find("span 1 (token 3, version 4) after span 0 (token 0, version 5)"),
            std::string::npos)
      << checked.error().detail;
}

TEST(CheckSpans, SpansMustStartBeforeTheLastToken) {
  const std::vector<VersionSpan> spans{{0, 1}, {4, 2}};
  EXPECT_TRUE(checkSpans(spans, 5).has_value());
  auto checked = checkSpans(spans, 4);
  ASSERT_FALSE(checked.has_value());
  EXPECT_EQ(checked.error().code, SpanError::PastLastToken);
  EXPECT_FALSE(checkSpans(std::vector<VersionSpan>{{0, 1}}, 0).has_value());
}

TEST(CheckSpans, CatchesTokensRecordedOutOfOrder) {
  SpanRecorder recorder;
  recorder.record(0, 1);
  recorder.record(5, 2);
  recorder.record(3, 3);  // a bug in the caller: the checker must say so
  EXPECT_FALSE(checkSpans(recorder.spans()).has_value());
}

}  // namespace
}  // namespace wsync::worker_agent
