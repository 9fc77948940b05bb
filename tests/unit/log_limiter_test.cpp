// The per-client log limit: a few lines per key and interval, then one summary with the exact count; keys are
// independent, idle ones are forgotten, and past the key cap new keys share one so that memory and lines stay
// bounded. Time is stepped by hand.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include "wsync/bus/core/log.hpp"
#include "wsync/bus/core/log_limiter.hpp"

namespace wsync::bus {
namespace {

using Clock = LogLimiter::Clock;
using namespace std::chrono_literals;

struct Line {
  spdlog::level::level_enum level;
  std::string text;
};

// Keeps every line wsync's logger writes.
class CapturingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<Line> lines;

 private:
  void sink_it_(const spdlog::details::log_msg& message) override {
    lines.push_back({message.level, std::string(message.payload.data(), message.payload.size())});
  }
  void flush_() override {}
};

struct LogLimiterTest : testing::Test {
  std::shared_ptr<CapturingSink> sink = std::make_shared<CapturingSink>();
  Clock::time_point start = Clock::now();
  int formatted = 0;

  void SetUp() override {
    auto logger = std::make_shared<spdlog::logger>("limiter-test", sink);
    logger->set_level(spdlog::level::info);
    log::setLogger(std::move(logger));
  }
  void TearDown() override { log::configure(log::Options{}); }

  // One line for `key`, counting how often its text is made.
  void warn(LogLimiter& limiter, const std::string& key, Clock::time_point now) {
    limiter.warn(key, now, [&] {
      ++formatted;
      return "send to " + key + " failed";
    });
  }
  std::vector<std::string> texts() const {
    std::vector<std::string> result;
    for (const Line& line : sink->lines) result.push_back(line.text);
    return result;
  }
};

TEST_F(LogLimiterTest, WritesTheFirstLinesThenNothing) {
  LogLimiter limiter;
  for (int n = 0; n < 8; ++n) warn(limiter, "send:worker-3", start + n * 1ms);
  EXPECT_EQ(sink->lines.size(), kLimitedLinesPerInterval);
  EXPECT_EQ(formatted, static_cast<int>(kLimitedLinesPerInterval)) << "suppressed lines must cost no formatting";
  EXPECT_EQ(sink->lines.front().text, "send to send:worker-3 failed");
  EXPECT_EQ(sink->lines.front().level, spdlog::level::warn);
}

TEST_F(LogLimiterTest, FlushWritesTheExactCountWhenTheIntervalEnds) {
  LogLimiter limiter;
  constexpr int kFlood = 290'081;  // the hostile client's lines in one interval
  for (int n = 0; n < kFlood; ++n) warn(limiter, "send:worker-3", start);
  limiter.flush(start + kLimitInterval - 1ms);
  EXPECT_EQ(sink->lines.size(), kLimitedLinesPerInterval) << "a summary before the interval ended";
  limiter.flush(start + kLimitInterval);
  ASSERT_EQ(sink->lines.size(), kLimitedLinesPerInterval + 1);
  EXPECT_EQ(sink->lines.back().text, "290,076 more like it from send:worker-3 in the last 10 s (suppressed)");
  EXPECT_EQ(sink->lines.back().level, spdlog::level::warn);
  EXPECT_EQ(limiter.trackedKeys(), 0U);
  limiter.flush(start + 3 * kLimitInterval);
  EXPECT_EQ(sink->lines.size(), kLimitedLinesPerInterval + 1) << "a summary is written once";
}

TEST_F(LogLimiterTest, TheNextLineAfterTheIntervalWritesTheSummaryFirst) {
  LogLimiter limiter({.linesPerInterval = 2, .interval = 500ms});
  for (int n = 0; n < 5; ++n) warn(limiter, "send:w", start);
  warn(limiter, "send:w", start + 500ms);
  warn(limiter, "send:w", start + 501ms);
  warn(limiter, "send:w", start + 502ms);
  EXPECT_EQ(texts(), (std::vector<std::string>{"send to send:w failed", "send to send:w failed",
                                               "3 more like it from send:w in the last 500 ms (suppressed)",
                                               "send to send:w failed", "send to send:w failed"}));
}

TEST_F(LogLimiterTest, KeysAreIndependent) {
  LogLimiter limiter({.linesPerInterval = 2});
  for (int n = 0; n < 10; ++n) warn(limiter, "send:flooder", start);
  warn(limiter, "send:quiet", start);
  warn(limiter, "refused:flooder", start);  // another kind of line from the same client
  EXPECT_EQ(texts(), (std::vector<std::string>{"send to send:flooder failed", "send to send:flooder failed",
                                               "send to send:quiet failed", "send to refused:flooder failed"}));
  limiter.flush(start + kLimitInterval);
  ASSERT_EQ(sink->lines.size(), 5U) << "only the flooder has a summary";
  EXPECT_EQ(sink->lines.back().text, "8 more like it from send:flooder in the last 10 s (suppressed)");
}

TEST_F(LogLimiterTest, KeysPastTheCapShareOneKey) {
  LogLimiter limiter({.linesPerInterval = 2, .maxTrackedKeys = 4});
  for (int client = 0; client < 4; ++client) warn(limiter, "send:agent-" + std::to_string(client), start);
  for (int client = 0; client < 1000; ++client) warn(limiter, "send:made-up-" + std::to_string(client), start);
  EXPECT_EQ(limiter.trackedKeys(), 5U);
  ASSERT_EQ(sink->lines.size(), 6U) << "past the cap, all new keys together get one key's lines";
  EXPECT_EQ(sink->lines[4].text, "send to send:made-up-0 failed");
  EXPECT_EQ(sink->lines[5].text, "send to send:made-up-1 failed");
  warn(limiter, "send:agent-2", start);  // tracked keys keep their own allowance
  EXPECT_EQ(sink->lines.size(), 7U);

  limiter.flush(start + kLimitInterval);
  ASSERT_EQ(sink->lines.size(), 8U);
  EXPECT_EQ(sink->lines.back().text, "998 more like it from other clients in the last 10 s (suppressed)");
  EXPECT_EQ(limiter.trackedKeys(), 0U);
  warn(limiter, "send:made-up-999", start + kLimitInterval);  // room again
  EXPECT_EQ(limiter.trackedKeys(), 1U);
}

TEST_F(LogLimiterTest, AKeyIdleForAnIntervalIsForgottenWithoutASummary) {
  LogLimiter limiter;
  warn(limiter, "send:once", start);
  EXPECT_EQ(limiter.trackedKeys(), 1U);
  limiter.flush(start + kLimitInterval / 2);
  EXPECT_EQ(limiter.trackedKeys(), 1U);
  limiter.flush(start + kLimitInterval);
  EXPECT_EQ(limiter.trackedKeys(), 0U);
  EXPECT_EQ(sink->lines.size(), 1U) << "nothing was suppressed, so nothing to summarise";
}

TEST_F(LogLimiterTest, LinesTheLevelFiltersOutAreNotCounted) {
  LogLimiter limiter({.linesPerInterval = 1});
  for (int n = 0; n < 10; ++n) {
    limiter.log(spdlog::level::debug, "send:w", start, [&] {
      ++formatted;
      return std::string("debug");
    });
  }
  EXPECT_EQ(formatted, 0);
  EXPECT_EQ(limiter.trackedKeys(), 0U);
  limiter.flush(start + kLimitInterval);
  EXPECT_TRUE(sink->lines.empty());
}

TEST_F(LogLimiterTest, TheSummaryHasTheHighestLevelSuppressedAndAPrintableKey) {
  LogLimiter limiter({.linesPerInterval = 1});
  const std::string key = std::string("send:\x01\xff", 7);  // a routing id is any bytes
  limiter.info(key, start, [] { return std::string("first"); });
  limiter.info(key, start, [] { return std::string("second"); });
  limiter.error(key, start, [] { return std::string("third"); });
  limiter.flush(start + kLimitInterval);
  ASSERT_EQ(sink->lines.size(), 2U);
  EXPECT_EQ(sink->lines.back().level, spdlog::level::err);
  EXPECT_EQ(sink->lines.back().text.find('\x01'), std::string::npos) << sink->lines.back().text;
  EXPECT_NE(sink->lines.back().text.find("2 more like it from send:"), std::string::npos) << sink->lines.back().text;
}

}  // namespace
}  // namespace wsync::bus
