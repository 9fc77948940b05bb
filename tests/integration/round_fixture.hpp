#pragma once
// Integration fixture for update rounds: the real wsync-coordinator, wsync-trainer and wsync-worker binaries as
// child processes on a private bus, plus an event subscriber that sees each round's outcome.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <tl/expected.hpp>
#include <vector>

#include <gtest/gtest.h>
#include <wsync/cli/child_process.hpp>
#include <zmq.hpp>

#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/transport/event_subscriber.hpp"

namespace wsync::test {

using cli::ChildProcess;

// A test waits this long for something that normally takes milliseconds; only a hang should reach it.
inline constexpr std::chrono::seconds kPatience{60};
// Fast failure detection for tests: a dead agent is declared after this much silence.
inline constexpr std::chrono::milliseconds kTestHeartbeatTimeout{1000};

struct RoundOutcome {
  std::uint64_t round = 0;
  std::uint64_t version = 0;
  bool committed = false;
  msg::AbortReason reason = msg::AbortReason::None;
  std::string detail;
  std::string agentId;
  bool reachedTransfer = false;  // a round/transfer event was seen for this round
  std::chrono::steady_clock::time_point at{};
};

// Subscribes to `prefixes` plus "bus/" and returns once the subscription is proven live: PUB/SUB drops what is
// published before the publisher has processed a subscription, and only a received event shows that it has (the
// coordinator's beat comes every heartbeat interval). The first event received is handed back in `first`.
tl::expected<bus::EventSubscriber, std::string> subscribeLive(zmq::context_t& context, const std::string& endpoint,
                                                              std::vector<std::string> prefixes,
                                                              std::optional<bus::Received>& first,
                                                              const std::optional<bus::CurveClient>& curve = {});

// The program at `builtPath`, or the one of the same name in $WSYNC_TEST_BIN_DIR where that is set (a build run on
// another machine, such as the GPU hosts, whose binaries are not where they were built).
std::string testBinary(const std::string& builtPath);

class RoundFixture : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Starts the coordinator and waits for its control block; subscribes to its events (over `transport_`, as a
  // CURVE client when `curve_` is set). With `stderrPath` its log lines go to that file.
  void startCoordinator(const std::vector<std::string>& extraArgs = {}, const std::string& stderrPath = {});
  // With `stderrPath` the agent's log lines go to that file.
  ChildProcess startWorker(const std::string& id, const std::vector<std::string>& extraArgs = {},
                           const std::string& stderrPath = {});
  ChildProcess startTrainer(const std::string& id, const std::vector<std::string>& extraArgs = {},
                            const std::string& stderrPath = {});
  // Waits until `count` agents hold slots.
  void waitForAgents(std::uint32_t count);
  // The next round outcome on the event stream (committed or aborted); fails the test on timeout.
  RoundOutcome nextOutcome(std::chrono::seconds timeout = kPatience);
  // The applied version in the control block of the agent registered as `agentId` (nothing if not registered).
  std::optional<std::uint64_t> appliedVersion(const std::string& agentId);
  bool waitForApplied(const std::string& agentId, std::uint64_t version, std::chrono::seconds timeout = kPatience);
  // This version or a later one: a worker holds only committed versions, and while a trainer keeps publishing, the
  // one an event named may be gone again by the time the test looks.
  bool waitForAppliedAtLeast(const std::string& agentId, std::uint64_t version,
                             std::chrono::seconds timeout = kPatience);
  // Until the round in the control block is in `phase`.
  bool waitForRoundPhase(msg::RoundPhase phase);
  std::string path(const std::string& name) const { return directory_ + "/" + name; }

  std::string bus_;
  std::string directory_;
  std::string transport_ = "ipc";
  std::optional<bus::CurveClient> curve_;
  std::optional<ChildProcess> coordinator_;
  zmq::context_t context_{1};
  std::optional<bus::EventSubscriber> events_;
  std::optional<bus::ControlBlockView> block_;
  std::optional<bus::Received> pending_;  // received while proving the subscription live, not yet looked at
  bool sawTransfer_ = false;
  std::uint64_t transferRound_ = 0;
};

}  // namespace wsync::test
