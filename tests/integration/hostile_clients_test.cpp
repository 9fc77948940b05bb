// Hostile clients against the real coordinator while honest agents run rounds: a registered trainer replaying old
// versions, a flood of messages, and frames over the size limit. The coordinator stays up and answers, the honest
// rounds go on, and no committed version goes back. (Garbage, unregistered commands and a stolen agent id are in
// update_round_test.cpp; each bad frame's handling in sockets_test.cpp.)
#include <csignal>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/agent_session.hpp"
#include "wsync/bus/bus_address.hpp"
#include "wsync/bus/dealer_endpoint.hpp"
#include "wsync/bus/manifest.hpp"
#include "wsync/bus/model_catalog.hpp"
#include "wsync/bus/protocol.hpp"

namespace wsync::test {
namespace {

// Enough to fill the coordinator's receive queue many times over (its high-water mark is 1,000 messages).
constexpr int kFloodMessages = 50'000;

// The coordinator answers a snapshot request: it is up and its loop is not stuck behind the hostile traffic.
bool answersSnapshots(zmq::context_t& context, const std::string& busName) {
  auto endpoints = bus::resolveEndpoints(busName);
  if (!endpoints) return false;
  auto dealer = bus::DealerEndpoint::connect(context, endpoints->requests, "probe");
  if (!dealer) return false;
  bus::MessageBuilder builder;
  if (!dealer->send(builder.finish(msg::CreateSnapshotRequest(builder.fbb()), bus::EnvelopeStamp{0, 1}))) return false;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    auto received = dealer->receive(std::chrono::milliseconds(100));
    if (!received) return false;
    if (*received && (*received)->message && (*received)->message->as<msg::SnapshotReply>() != nullptr) return true;
  }
  return false;
}

TEST_F(RoundFixture, ATrainerReplayingOldVersionsIsRefusedAndNothingGoesBack) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto honest = startTrainer("t0", {"--steps", "3"});
  for (int round = 0; round < 3; ++round) ASSERT_TRUE(nextOutcome().committed);
  ASSERT_EQ(honest.wait(kPatience), 0);
  ASSERT_EQ(block_->committedVersion(), 3U);

  // A registered trainer (allowed in: ipc is this user's) sends BeginUpdates for versions already committed.
  zmq::context_t context(1);
  bus::SessionOptions options;
  options.bus = bus_;
  options.agentId = "replayer";
  options.role = msg::Role::Trainer;
  auto session = bus::AgentSession::open(context, options);
  ASSERT_TRUE(session);
  ASSERT_TRUE((*session)->registerAgent(0));
  auto specs = bus::modelTensors("tiny");
  ASSERT_TRUE(specs);
  auto manifest = bus::Manifest::create(*specs);
  ASSERT_TRUE(manifest);
  std::vector<msg::ErrorCode> refusals;
  for (const std::uint64_t replayed : {1U, 2U, 3U}) {
    bus::MessageBuilder builder(64 * 1024);
    auto& fbb = builder.fbb();
    const auto manifestOffset = manifest->toMessage(fbb);
    const msg::Digest128 digest = bus::toMessage(manifest->digest());
    ASSERT_TRUE((*session)->send(builder, msg::CreateBeginUpdate(fbb, replayed, 0, &digest, manifestOffset,
                                                                 msg::ChannelKind::Shm, msg::PauseMode::Keep,
                                                                 manifest->totalBytes())));
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      auto delivery = (*session)->next(std::chrono::milliseconds(100));
      ASSERT_TRUE(delivery);
      if (delivery->message && delivery->message->as<msg::Error>() != nullptr) {
        refusals.push_back(delivery->message->as<msg::Error>()->code());
        break;
      }
    }
  }
  EXPECT_EQ(refusals, std::vector<msg::ErrorCode>(3, msg::ErrorCode::VersionNotIncreasing));
  EXPECT_EQ(block_->committedVersion(), 3U);
  EXPECT_EQ(appliedVersion("w0"), 3U);
  (*session)->goodbye("done");

  // The honest trainer goes on above it.
  auto next = startTrainer("t0", {"--steps", "1"});
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(outcome.version, 4U);
  EXPECT_EQ(next.wait(kPatience), 0);
}

TEST_F(RoundFixture, AFloodAndOversizedFramesLeaveTheCoordinatorAnsweringAndTheRoundsGoingOn) {
  startCoordinator({}, path("coordinator.log"));
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "0", "--interval-ms", "20"});
  ASSERT_TRUE(nextOutcome().committed);

  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  // Flooders on their own threads, so that the honest traffic and the probe run beside them.
  std::atomic<bool> flooding{true};
  std::jthread flooder([&] {
    zmq::socket_t rogue(context_, zmq::socket_type::dealer);
    rogue.set(zmq::sockopt::linger, 0);
    rogue.set(zmq::sockopt::sndhwm, 0);  // no limit on our side: the coordinator's own limits must hold
    rogue.connect(endpoints->requests);
    bus::MessageBuilder builder;
    const auto heartbeat = builder.finish(msg::CreateHeartbeat(builder.fbb(), 1'000'000), bus::EnvelopeStamp{0, 1});
    for (int index = 0; index < kFloodMessages && flooding.load(); ++index) {
      // Unregistered heartbeats (each answered with UnknownAgent) and garbage, as fast as the socket takes them.
      if (index % 2 == 0) {
        rogue.send(zmq::const_buffer(heartbeat.data(), heartbeat.size()), zmq::send_flags::dontwait);
      } else {
        rogue.send(zmq::str_buffer("garbage garbage garbage"), zmq::send_flags::dontwait);
      }
    }
  });
  std::jthread oversized([&] {
    // Frames over kMaxMessageBytes: ZeroMQ drops such a connection; the client reconnects and tries again.
    const std::vector<std::uint8_t> huge(bus::kMaxMessageBytes + 1, 0x5A);
    for (int attempt = 0; attempt < 5 && flooding.load(); ++attempt) {
      zmq::socket_t rogue(context_, zmq::socket_type::dealer);
      rogue.set(zmq::sockopt::linger, 200);
      rogue.connect(endpoints->requests);
      rogue.send(zmq::const_buffer(huge.data(), huge.size()), zmq::send_flags::none);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  zmq::context_t probeContext(1);
  EXPECT_TRUE(answersSnapshots(probeContext, bus_)) << "the coordinator did not answer during the flood";
  for (int round = 0; round < 5; ++round) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
  }
  flooding.store(false);
  flooder.join();
  oversized.join();
  EXPECT_FALSE(coordinator_->wait(std::chrono::milliseconds(0))) << "the coordinator died";
  EXPECT_TRUE(answersSnapshots(probeContext, bus_));
  const std::uint64_t committed = block_->committedVersion();
  EXPECT_LT(committed, 1'000'000U);
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", block_->committedVersion()));
  // The flood reached the coordinator (it is not that the sends were all dropped on our side): it says, as it
  // stops, how many requests it rejected.
  coordinator_->signal(SIGTERM);
  ASSERT_EQ(coordinator_->wait(kPatience), 0);
  const std::string log = readTextFile(path("coordinator.log"));
  std::smatch rejected;
  ASSERT_TRUE(std::regex_search(log, rejected, std::regex(R"((\d+) requests rejected)"))) << log;
  EXPECT_GT(std::stoull(rejected[1].str()), 1000U) << rejected[0];
}

}  // namespace
}  // namespace wsync::test
