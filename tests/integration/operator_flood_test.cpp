// An operator's requests at a rate no operator types (docs/security.md, "Bounded cost per client"): one connection
// that needs no registration sends pause and resume in a loop. The workers see the operator's pause change a bounded
// number of times (kOperatorPauseInterval apart at most), end in the state asked for last, the coordinator's log
// grows by a bounded number of lines, and the next round commits without waiting out a pause timeout.
#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include "raw_client.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/core/log_limiter.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/coordinator/coordinator_options.hpp"

namespace wsync::test {
namespace {

// The reproduction sent pause/resume pairs for 12 s (18,006 log lines); this many pairs takes a few seconds here.
constexpr int kFloodPairs = 5'000;
// What a worker logs each time the operator's pause reaches it.
constexpr std::string_view kWorkerSawPause = "an operator paused generation";
constexpr std::string_view kWorkerSawResume = "an operator resumed generation";

std::size_t occurrences(const std::string& text, std::string_view needle) {
  std::size_t count = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++count;
  return count;
}

// Sends `count` control requests of `action` without reading the answers in between; reads them all after.
void sendControls(RawClient& client, const std::vector<msg::ControlAction>& actions) {
  for (const auto action : actions) {
    bus::MessageBuilder builder;
    auto& fbb = builder.fbb();
    client.send(builder, msg::CreateControlRequest(fbb, action, msg::PauseMode::Abort, 0, fbb.CreateString("flood")));
  }
}

TEST_F(RoundFixture, AFloodOfOperatorPausesCostsTheWorkersABoundedNumberOfPauses) {
  startCoordinator({}, path("coordinator.log"));
  auto w0 = startWorker("w0", {"--log-level", "info"}, path("w0.log"));
  auto w1 = startWorker("w1", {"--log-level", "info"}, path("w1.log"));
  waitForAgents(2);
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient flooder(context_, endpoints->requests, "flooder", 100'000);

  std::vector<msg::ControlAction> actions;
  for (int pair = 0; pair < kFloodPairs; ++pair) {
    actions.push_back(msg::ControlAction::Pause);
    actions.push_back(msg::ControlAction::Resume);
  }
  const auto floodStarted = std::chrono::steady_clock::now();
  sendControls(flooder, actions);
  // Every request is answered (a reply or a refusal), so the last answer marks the end of the flood's handling.
  std::size_t answers = 0;
  while (answers < actions.size()) {
    const auto answer = flooder.receive(
        [](const bus::Message& message) {
          return message.as<msg::ControlReply>() != nullptr || message.as<msg::Error>() != nullptr;
        },
        kPatience);
    ASSERT_TRUE(answer) << answers << " of " << actions.size() << " requests answered";
    ++answers;
  }
  // The last request was a resume: once the changes settle, the workers are not paused by the operator.
  std::this_thread::sleep_for(4 * coordinator::kOperatorPauseInterval);
  const auto floodLasted = std::chrono::steady_clock::now() - floodStarted;
  EXPECT_FALSE(block_->pauseState().paused) << "the workers did not end in the state asked for last";

  // The state changed at most once per interval while the flood lasted (plus the first change, at once).
  const auto bound = static_cast<std::size_t>(floodLasted / coordinator::kOperatorPauseInterval) + 2;
  for (const std::string worker : {"w0", "w1"}) {
    const std::string log = readTextFile(path(worker + ".log"));
    const std::size_t pauses = occurrences(log, kWorkerSawPause);
    EXPECT_GE(pauses, 1U) << worker << " never saw the operator's pause";
    EXPECT_LE(pauses, bound) << worker << " saw " << pauses << " operator pauses for " << kFloodPairs << " requests";
    EXPECT_LE(occurrences(log, kWorkerSawResume), bound) << worker;
  }
  // The coordinator's log: the flooder's lines through the limiter, the changes at their bounded rate.
  const std::string log = readTextFile(path("coordinator.log"));
  EXPECT_LE(occurrences(log, "operator: "), bound + 4 * bus::kLimitedLinesPerInterval) << log.substr(0, 4000);

  // Nothing was left queued behind the flood: a round pauses, transfers and commits, and both workers apply it.
  auto trainer = startTrainer("t0", {"--steps", "1"});
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 1));
  EXPECT_TRUE(waitForApplied("w1", 1));
}

// Pause and resume still take effect at once when they come at an operator's pace, and the last one wins.
TEST_F(RoundFixture, OperatorRequestsAtAnOperatorsPaceApplyAtOnceAndTheLastWins) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient ctl(context_, endpoints->requests, "ctl");
  sendControls(ctl, {msg::ControlAction::Pause});
  ASSERT_TRUE(ctl.receive<msg::ControlReply>(kPatience));
  EXPECT_TRUE(block_->pauseState().paused);
  // Three changes inside one interval: the workers end in the last one's state.
  sendControls(ctl, {msg::ControlAction::Resume, msg::ControlAction::Pause, msg::ControlAction::Resume});
  for (int answer = 0; answer < 3; ++answer) ASSERT_TRUE(ctl.receive<msg::ControlReply>(kPatience));
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (block_->pauseState().paused && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(block_->pauseState().paused);
}

}  // namespace
}  // namespace wsync::test
