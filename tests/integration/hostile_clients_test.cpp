// Hostile clients against the real coordinator while honest agents run rounds: a registered trainer replaying old
// versions, a flood of messages, and frames over the size limit. The coordinator stays up and answers, the honest
// rounds go on, and no committed version goes back. (Garbage, unregistered commands and a stolen agent id are in
// update_round_test.cpp; each bad frame's handling in sockets_test.cpp.)
//
// The second half are the reproductions of issue 13 (docs/security.md, "What no client can do"), each written as a
// client from schemas/control.fbs alone (RawClient: a DEALER and the generated builders): a hello that lies about
// its version, a message of many parts, a client that never reads its answers, more workers than a round takes,
// names with NUL, enums out of range, another coordinator's epoch.
#include <csignal>
#include <fstream>
#include <limits>
#include <regex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "raw_client.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/channel/shm/shm_arena_data.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"
#include "wsync/cli/model_catalog.hpp"

namespace wsync::test {
namespace {

// Enough to fill the coordinator's receive queue many times over (its high-water mark is 1,000 messages).
constexpr int kFloodMessages = 50'000;
// How long a flooder's closed socket keeps delivering what it queued: the flood must reach the coordinator, which
// counts what it rejected, and a socket closed with linger 0 drops its queue (seen on a loaded machine: 0 rejected).
constexpr std::chrono::milliseconds kFloodLinger{10'000};
// The issue's reproduction: unregistered heartbeats from a client that never reads its answers.
constexpr int kUnreadHeartbeats = 300'000;
// A message of many parts, each under the frame limit: 192 x 16 MiB = 3 GiB in all.
constexpr int kHugeMessageParts = 192;
constexpr std::size_t kHugeMessagePartBytes = std::size_t{16} << 20;
// The receive budget the memory test gives the coordinator, and what its peak may exceed it by: what arrives
// between two checks (20 ms) plus, under AddressSanitizer, its quarantine of freed blocks (256 MiB).
constexpr std::uint64_t kTestReceiveBudgetMiB = 128;
constexpr std::uint64_t kPeakSlackMiB = 640;

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

// A field of /proc/PID/status in KiB ("VmHWM", "VmRSS"), or 0.
std::uint64_t statusKiB(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(field + ":")) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

// The coordinator's snapshot, as any client may ask for it.
std::optional<bus::Message> snapshotOf(RawClient& client) {
  bus::MessageBuilder builder;
  client.send(builder, msg::CreateSnapshotRequest(builder.fbb()));
  return client.receive<msg::SnapshotReply>(kPatience);
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
  auto specs = cli::modelTensors("tiny");
  ASSERT_TRUE(specs);
  auto manifest = bus::Manifest::create(*specs);
  ASSERT_TRUE(manifest);
  std::vector<msg::ErrorCode> refusals;
  for (const std::uint64_t replayed : {1U, 2U, 3U}) {
    bus::MessageBuilder builder(64 * 1024);
    auto& fbb = builder.fbb();
    const auto manifestOffset = manifest->toMessage(fbb);
    const msg::Digest128 digest = bus::toMessage(manifest->digest());
    ASSERT_TRUE((*session)->send(
        builder, msg::CreateBeginUpdate(fbb, replayed, 0, &digest, manifestOffset, msg::ChannelKind::Shm,
                                        msg::PauseMode::Keep, manifest->totalBytes())));
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
    rogue.set(zmq::sockopt::linger, static_cast<int>(kFloodLinger.count()));
    rogue.set(zmq::sockopt::sndhwm, 0);  // no limit on our side: the coordinator's own limits must hold
    rogue.connect(endpoints->requests);
    bus::MessageBuilder builder;
    const auto heartbeat = builder.finish(msg::CreateHeartbeat(builder.fbb(), 1'000'000), bus::EnvelopeStamp{0, 1});
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    for (int index = 0; index < kFloodMessages && std::chrono::steady_clock::now() < deadline;) {
      // Unregistered heartbeats (each answered with UnknownAgent) and garbage, as fast as the socket takes them.
      // Every message is sent: a send refused before the connection is up is tried again, so that the flood does not
      // depend on how soon it connects.
      const auto sent =
          index % 2 == 0 ? rogue.send(zmq::const_buffer(heartbeat.data(), heartbeat.size()), zmq::send_flags::dontwait)
                         : rogue.send(zmq::str_buffer("garbage garbage garbage"), zmq::send_flags::dontwait);
      if (sent) {
        ++index;
      } else {
        std::this_thread::yield();
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
  flooder.join();  // all of the flood sent
  flooding.store(false);
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

// Issue 13, 1: a hello is a claim about the agent, never bus state.
TEST_F(RoundFixture, AHelloCannotSetTheCommittedVersion) {
  startCoordinator({}, path("coordinator.log"));
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "3"});
  for (int round = 0; round < 3; ++round) ASSERT_TRUE(nextOutcome().committed);
  ASSERT_EQ(trainer.wait(kPatience), 0);
  ASSERT_EQ(block_->committedVersion(), 3U);

  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  // Between rounds, one hello claiming the highest version there is, another a smaller lie; then goodbye.
  for (const std::uint64_t claimed : {std::numeric_limits<std::uint64_t>::max(), std::uint64_t{7}}) {
    RawClient liar(context_, endpoints->requests, "liar");
    ASSERT_TRUE(liar.registerAs({.agentId = "liar", .appliedVersion = claimed}, kPatience));
    bus::MessageBuilder builder;
    liar.send(builder, msg::CreateGoodbye(builder.fbb(), builder.fbb().CreateString("bye")), liar.epoch());
    RawClient probe(context_, endpoints->requests, "probe");
    const auto snapshot = snapshotOf(probe);
    ASSERT_TRUE(snapshot);
    EXPECT_EQ(snapshot->as<msg::SnapshotReply>()->committed_version(), 3U) << "claimed " << claimed;
    EXPECT_EQ(block_->committedVersion(), 3U) << "claimed " << claimed;
  }
  // Nor does it survive a crash of the coordinator: the control block carries only what was committed.
  coordinator_->signal(SIGKILL);
  ASSERT_EQ(coordinator_->wait(kPatience), 128 + SIGKILL);
  startCoordinator();
  EXPECT_EQ(block_->committedVersion(), 3U);
  waitForAgents(1);
  auto next = startTrainer("t1", {"--steps", "1"});
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(outcome.version, 4U);
  EXPECT_EQ(next.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 4));
}

// Issue 13, 3: ZeroMQ assembles a message of many parts whole before handing it over, so only a budget on what the
// request endpoint holds bounds it; past the budget the endpoint is reset and the agents register again.
TEST_F(RoundFixture, AMessageOfManyPartsCannotTakeMoreMemoryThanTheReceiveBudget) {
  startCoordinator({"--receive-budget-mib", std::to_string(kTestReceiveBudgetMiB)}, path("coordinator.log"));
  auto worker = startWorker("w0");
  waitForAgents(1);
  const std::uint64_t peakBeforeKiB = statusKiB(coordinator_->pid(), "VmHWM");
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  {
    // Zero-copy parts of one buffer, so that this process does not hold 3 GiB itself.
    static const std::vector<std::uint8_t> part(kHugeMessagePartBytes, 0x5A);
    RawClient sender(context_, endpoints->requests, "many-parts");
    sender.watchForDisconnect();
    for (int index = 0; index < kHugeMessageParts; ++index) {
      zmq::message_t frame(const_cast<std::uint8_t*>(part.data()), part.size(), nullptr, nullptr);
      const auto more = index + 1 < kHugeMessageParts ? zmq::send_flags::sndmore : zmq::send_flags::none;
      sender.socket().send(frame, more);
    }
    // The coordinator resets its endpoint once the parts it holds pass the budget.
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (readTextFile(path("coordinator.log")).find("over the receive budget") == std::string::npos) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the coordinator never reset its endpoint";
      ASSERT_FALSE(coordinator_->wait(std::chrono::milliseconds(20))) << "the coordinator died";
    }
    // Closing the sender while its connection is still going down can abort it inside libzmq 4.3.4: the I/O thread
    // drops the rest of the half-sent message from a pipe the close already shut ("Resource temporarily
    // unavailable (src/session_base.cpp:260)"). Closed once ZeroMQ reports the connection gone, it cannot.
    ASSERT_TRUE(sender.waitForDisconnect(kPatience)) << "the coordinator reset its endpoint but kept the connection";
  }
  const std::uint64_t peakKiB = statusKiB(coordinator_->pid(), "VmHWM");
  EXPECT_LT(peakKiB, peakBeforeKiB + ((kTestReceiveBudgetMiB + kPeakSlackMiB) << 10))
      << "the coordinator's peak grew from " << (peakBeforeKiB >> 10) << " MiB to " << (peakKiB >> 10)
      << " MiB for a message of " << ((kHugeMessageParts * kHugeMessagePartBytes) >> 20) << " MiB";
  // The agents' registrations went with the endpoint; they noticed their link gone and registered again.
  const auto back = std::chrono::steady_clock::now() + kPatience;
  const auto joins = [&] { return occurrences(readTextFile(path("coordinator.log")), "Worker 'w0' joined"); };
  while (joins() < 2) {
    ASSERT_LT(std::chrono::steady_clock::now(), back) << "the worker never registered again after the reset";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "2"});
  for (int round = 0; round < 2; ++round) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 2));
}

// Issue 13, 4: a client that never reads its answers decides nothing about how much is logged.
TEST_F(RoundFixture, AClientThatNeverReadsItsAnswersCostsAFewLogLines) {
  startCoordinator({}, path("coordinator.log"));
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient flood(context_, endpoints->requests, "never-reads", /*receiveHighWaterMark=*/1);
  bus::MessageBuilder builder;
  for (int index = 0; index < kUnreadHeartbeats; ++index) {
    builder.reset();
    flood.send(builder, msg::CreateHeartbeat(builder.fbb(), 1));
  }
  // Every heartbeat refused (as unregistered) once the coordinator has read them all; the summary of the suppressed
  // lines comes when the limiter's interval ends.
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  std::string log;
  while ((log = readTextFile(path("coordinator.log"))).find("more like it") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no summary line in the coordinator's log:\n" << log;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  coordinator_->signal(SIGTERM);
  ASSERT_EQ(coordinator_->wait(kPatience), 0);
  log = readTextFile(path("coordinator.log"));
  const auto lines = std::count(log.begin(), log.end(), '\n');
  EXPECT_LT(lines, 40) << log;
  EXPECT_LT(log.size(), std::size_t{16} << 10);
  std::smatch rejected;
  ASSERT_TRUE(std::regex_search(log, rejected, std::regex(R"((\d+) requests rejected)"))) << log;
  EXPECT_EQ(std::stoull(rejected[1].str()), static_cast<std::uint64_t>(kUnreadHeartbeats)) << rejected[0];
}

// Issue 13, 6: every registered worker takes part in every round, so no more are admitted than a round takes.
TEST_F(RoundFixture, NoMoreWorkersRegisterThanARoundOnTheirChannelTakes) {
  // Silent raw workers stay registered: they are this live process, and their heartbeats may be a minute apart.
  startCoordinator({"--heartbeat-interval-ms", "1000", "--heartbeat-timeout-ms", "60000"});
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  std::vector<std::unique_ptr<RawClient>> workers;
  for (std::size_t index = 0; index < bus::kMaxArenaReceivers; ++index) {
    workers.push_back(std::make_unique<RawClient>(context_, endpoints->requests, "w"));
    ASSERT_TRUE(workers.back()->registerAs({.agentId = "w" + std::to_string(index)}, kPatience)) << index;
  }
  RawClient oneMore(context_, endpoints->requests, "w64");
  oneMore.sendHello({.agentId = "w64"});
  const auto refusal = oneMore.receive<msg::Error>(kPatience);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->as<msg::Error>()->code(), msg::ErrorCode::BusFull);
  EXPECT_THAT(refusal->as<msg::Error>()->detail()->str(),
              ::testing::AllOf(::testing::HasSubstr("shm"), ::testing::HasSubstr("at most 64")));
  // A worker on another channel, whose rounds take more, still joins.
  RawClient gpuWorker(context_, endpoints->requests, "g0");
  EXPECT_TRUE(gpuWorker.registerAs({.agentId = "g0", .channels = {msg::ChannelKind::Nccl}}, kPatience));
  // And once one leaves, the next shm worker is admitted.
  bus::MessageBuilder builder;
  workers.back()->send(builder, msg::CreateGoodbye(builder.fbb(), builder.fbb().CreateString("bye")),
                       workers.back()->epoch());
  // The goodbye and the next hello travel on different connections, which the coordinator may read in either
  // order: wait until the goodbye has been handled.
  const auto registered = static_cast<std::uint32_t>(bus::kMaxArenaReceivers) + 1;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (block_->activeAgents() >= registered) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the goodbye was not handled";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  RawClient replacement(context_, endpoints->requests, "w64b");
  EXPECT_TRUE(replacement.registerAs({.agentId = "w64"}, kPatience));
}

// Issue 13, 7: names are checked by the coordinator with the workers' own rule, before a round begins.
TEST_F(RoundFixture, ATensorNameWithANulIsRefusedBeforeAnyRoundBegins) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient trainer(context_, endpoints->requests, "raw-trainer");
  ASSERT_TRUE(trainer.registerAs({.agentId = "raw-trainer", .role = msg::Role::Trainer}, kPatience));
  for (const std::string& name : {std::string("nul\0inside", 10), std::string("\0lead", 5)}) {
    bus::MessageBuilder builder(64 * 1024);
    auto& fbb = builder.fbb();
    const std::vector<std::int64_t> shape{4};
    const auto tensor = msg::CreateTensorInfo(fbb, fbb.CreateString(name), msg::DType::F32, fbb.CreateVector(shape));
    // The true digest of the list, NUL included, as the issue's client sent it: only the name can be refused.
    const msg::Digest128 digest = bus::toMessage(bus::digestOf({bus::TensorSpec{name, msg::DType::F32, shape}}));
    const auto manifest = msg::CreateManifest(fbb, &digest, fbb.CreateVector(std::vector{tensor}), 16);
    const auto seq = trainer.send(
        builder, msg::CreateBeginUpdate(fbb, 1, 0, &digest, manifest, msg::ChannelKind::Shm, msg::PauseMode::Keep, 16),
        trainer.epoch());
    const auto refusal = trainer.receive(
        [&](const bus::Message& message) {
          return message.as<msg::Error>() != nullptr && message.as<msg::Error>()->in_reply_to() == seq;
        },
        kPatience);
    ASSERT_TRUE(refusal);
    EXPECT_EQ(refusal->as<msg::Error>()->code(), msg::ErrorCode::Malformed);
    EXPECT_THAT(refusal->as<msg::Error>()->detail()->str(), ::testing::HasSubstr("NUL"));
  }
  // No round began: the worker was never paused, and an honest trainer commits version 1.
  EXPECT_EQ(block_->roundState().round, 0U);
  auto honest = startTrainer("t0", {"--steps", "1"});
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(outcome.version, 1U);
  EXPECT_EQ(honest.wait(kPatience), 0);
}

// A hello's channel contacts are handed to every receiver of its rounds and named in logs: bounded and printable,
// or the hello is refused. And a round on tcp whose sender advertised no contact is refused before anyone pauses.
TEST_F(RoundFixture, ChannelContactsAreCheckedAndATcpSenderWithoutOneIsRefused) {
  startCoordinator();
  auto worker = startWorker("w0", {"--channel", "tcp"});
  waitForAgents(1);
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  for (const std::string& address :
       {std::string("10.0.0.7:4100\n[fake log line]"), std::string(bus::kMaxContactAddressBytes + 1, '1')}) {
    RawClient liar(context_, endpoints->requests, "contact");
    liar.sendHello({.agentId = "contact",
                    .role = msg::Role::Trainer,
                    .channels = {msg::ChannelKind::Tcp},
                    .contacts = {{msg::ChannelKind::Tcp, address}}});
    const auto refusal = liar.receive<msg::Error>(kPatience);
    ASSERT_TRUE(refusal);
    EXPECT_EQ(refusal->as<msg::Error>()->code(), msg::ErrorCode::InvalidField);
    EXPECT_THAT(refusal->as<msg::Error>()->detail()->str(), ::testing::HasSubstr("channel contact"));
  }
  EXPECT_EQ(block_->activeAgents(), 1U);

  RawClient trainer(context_, endpoints->requests, "mute-trainer");
  ASSERT_TRUE(trainer.registerAs({.agentId = "mute", .role = msg::Role::Trainer, .channels = {msg::ChannelKind::Tcp}},
                                 kPatience));
  bus::MessageBuilder builder(64 * 1024);
  auto& fbb = builder.fbb();
  const auto manifest = bus::Manifest::create(*cli::modelTensors("tiny"));
  ASSERT_TRUE(manifest);
  const msg::Digest128 digest = bus::toMessage(manifest->digest());
  const auto seq =
      trainer.send(builder,
                   msg::CreateBeginUpdate(fbb, 1, 0, &digest, manifest->toMessage(fbb), msg::ChannelKind::Tcp,
                                          msg::PauseMode::Keep, manifest->totalBytes()),
                   trainer.epoch());
  const auto refusal = trainer.receive(
      [&](const bus::Message& message) {
        return message.as<msg::Error>() != nullptr && message.as<msg::Error>()->in_reply_to() == seq;
      },
      kPatience);
  ASSERT_TRUE(refusal);
  EXPECT_THAT(refusal->as<msg::Error>()->detail()->str(), ::testing::HasSubstr("'mute' offered no tcp contact"));
  EXPECT_EQ(block_->roundState().round, 0U) << "no round began";
  EXPECT_FALSE(block_->pauseState().paused);
}

// Issue 13, 8: an enum field holding a value its schema does not define is refused, naming the field.
TEST_F(RoundFixture, EnumsOutOfTheirRangeAreRefusedNamingTheField) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient client(context_, endpoints->requests, "enums");
  bus::MessageBuilder builder;
  client.send(builder,
              msg::CreateControlRequest(builder.fbb(), msg::ControlAction::Pause, static_cast<msg::PauseMode>(200)));
  auto refusal = client.receive<msg::Error>(kPatience);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->as<msg::Error>()->code(), msg::ErrorCode::Malformed);
  EXPECT_THAT(refusal->as<msg::Error>()->detail()->str(), ::testing::HasSubstr("pause_mode"));
  // Nothing was paused.
  EXPECT_FALSE(block_->pauseState().paused);
  EXPECT_FALSE(block_->operatorPause());

  builder.reset();
  auto& fbb = builder.fbb();
  client.send(builder, msg::CreateAgentHello(fbb, fbb.CreateString("role77"), static_cast<msg::Role>(77),
                                             bus::kProtocolVersion, -1, 1, static_cast<std::uint32_t>(::getpid())));
  refusal = client.receive<msg::Error>(kPatience);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->as<msg::Error>()->code(), msg::ErrorCode::Malformed);
  EXPECT_THAT(refusal->as<msg::Error>()->detail()->str(), ::testing::HasSubstr("role"));
  EXPECT_EQ(block_->activeAgents(), 1U);
}

// Issue 13 ("also seen"): a registered agent's messages carry the epoch of the coordinator that welcomed it, and a
// control request naming another coordinator's epoch steers nothing.
TEST_F(RoundFixture, MessagesOfAnotherEpochAreRefused) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient agent(context_, endpoints->requests, "stale");
  const auto epoch = agent.registerAs({.agentId = "stale", .role = msg::Role::Trainer}, kPatience);
  ASSERT_TRUE(epoch);
  bus::MessageBuilder builder;
  agent.send(builder, msg::CreateHeartbeat(builder.fbb(), 0), *epoch + 1);
  auto refusal = agent.receive<msg::Error>(kPatience);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->as<msg::Error>()->code(), msg::ErrorCode::StaleEpoch);

  RawClient operatorClient(context_, endpoints->requests, "ctl");
  builder.reset();
  operatorClient.send(builder, msg::CreateControlRequest(builder.fbb(), msg::ControlAction::Pause), *epoch + 1);
  refusal = operatorClient.receive<msg::Error>(kPatience);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->as<msg::Error>()->code(), msg::ErrorCode::StaleEpoch);
  EXPECT_FALSE(block_->pauseState().paused);
}

}  // namespace
}  // namespace wsync::test
