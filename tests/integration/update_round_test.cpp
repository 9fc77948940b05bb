// Update rounds end to end with the real binaries: commits, and each way a round must fail without losing
// anything (docs/update-round.md, "Aborts").
#include <sys/mman.h>
#include <sys/socket.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model_variant.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "weight_dumps.hpp"
#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::test {
namespace {

using ::testing::HasSubstr;

TEST_F(RoundFixture, VersionsReachEveryWorkerByteForByte) {
  startCoordinator();
  auto first = startWorker("w0", {"--dump", path("w0.safetensors")});
  auto second = startWorker("w1", {"--dump", path("w1.safetensors")});
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "3", "--dump", path("trainer.safetensors")});
  for (std::uint64_t version = 1; version <= 3; ++version) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    EXPECT_EQ(outcome.version, version);
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 3));
  EXPECT_TRUE(waitForApplied("w1", 3));
  EXPECT_EQ(block_->committedVersion(), 3U);
  first.signal(SIGTERM);
  second.signal(SIGTERM);
  ASSERT_EQ(first.wait(kPatience), 0);
  ASSERT_EQ(second.wait(kPatience), 0);

  for (const char* worker : {"w0.safetensors", "w1.safetensors"}) {
    expectSameWeights(path("trainer.safetensors"), path(worker), 3);
  }
}

// A worker loaded with the wrong checkpoint: one kind of difference each; `change` returns the tensor the
// refusal must name.
struct MismatchCase {
  const char* name;
  std::string (*change)(std::vector<bus::TensorSpec>&);
};

class ManifestMismatch : public RoundFixture, public ::testing::WithParamInterface<MismatchCase> {};

TEST_P(ManifestMismatch, FailsTheRoundBeforeAnyByteMovesAndNamesTheTensor) {
  const MismatchCase& mismatch = GetParam();
  startCoordinator();
  std::string named;
  const std::string variant =
      writeModelVariant(path("variant.safetensors"), "tiny",
                        [&](std::vector<bus::TensorSpec>& specs) { named = mismatch.change(specs); });
  auto good = startWorker("good");
  auto bad = startWorker("bad", {"--model", variant});
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "1"});
  const auto outcome = nextOutcome();
  EXPECT_FALSE(outcome.committed);
  EXPECT_EQ(outcome.reason, msg::AbortReason::ManifestMismatch);
  EXPECT_EQ(outcome.agentId, "bad");
  EXPECT_THAT(outcome.detail, HasSubstr("'" + named + "'"));
  EXPECT_FALSE(outcome.reachedTransfer) << "the round must fail before the transfer phase";
  EXPECT_EQ(trainer.wait(kPatience), 4) << "the trainer reports a version that was not committed";
  EXPECT_EQ(appliedVersion("good"), 0U);
  EXPECT_EQ(appliedVersion("bad"), 0U);
  EXPECT_EQ(block_->committedVersion(), 0U);
}

INSTANTIATE_TEST_SUITE_P(EachKind, ManifestMismatch,
                         ::testing::Values(MismatchCase{"Name",
                                                        [](std::vector<bus::TensorSpec>& specs) {
                                                          const std::string original = specs[1].name;
                                                          specs[1].name = "renamed.weight";
                                                          return original;  // the trainer's tensor that is not bound
                                                        }},
                                           MismatchCase{"Dtype",
                                                        [](std::vector<bus::TensorSpec>& specs) {
                                                          specs[0].dtype = specs[0].dtype == msg::DType::F32
                                                                               ? msg::DType::I32
                                                                               : msg::DType::F32;
                                                          return specs[0].name;
                                                        }},
                                           MismatchCase{"Shape",
                                                        [](std::vector<bus::TensorSpec>& specs) {
                                                          specs[0].shape.push_back(1);
                                                          return specs[0].name;
                                                        }},
                                           MismatchCase{"Count",
                                                        [](std::vector<bus::TensorSpec>& specs) {
                                                          const std::string dropped = specs.back().name;
                                                          specs.pop_back();
                                                          return dropped;
                                                        }}),
                         [](const auto& testInfo) { return std::string(testInfo.param.name); });

TEST_F(RoundFixture, AWorkerKilledMidRoundAbortsItTheOthersKeepTheirVersionAndTheRestartedOneCatchesUp) {
  startCoordinator();
  auto steady = startWorker("steady");
  std::optional<ChildProcess> doomed = startWorker("doomed", {"--fault", "kill@transfer:2"});
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "0", "--interval-ms", "100"});
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.version, 2U);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied);
  EXPECT_EQ(aborted.agentId, "doomed");
  EXPECT_EQ(appliedVersion("steady"), 1U) << "the surviving worker keeps the previous version";
  EXPECT_EQ(block_->committedVersion(), 1U);
  EXPECT_EQ(doomed->wait(kPatience), 128 + SIGKILL);
  doomed.reset();
  // Restarted under the same id: the old registration is replaced and the next round brings it up to date.
  auto restarted = startWorker("doomed");
  waitForAgents(3);  // steady, the trainer and the restarted worker
  // The first commit after the restarted worker registered: it and the survivor serve it or a later one.
  const std::uint64_t registeredAt = block_->committedVersion();
  RoundOutcome outcome;
  do {
    outcome = nextOutcome();
    ASSERT_TRUE(outcome.committed) << outcome.detail;
  } while (outcome.version <= registeredAt);
  EXPECT_TRUE(waitForAppliedAtLeast("doomed", outcome.version)) << "the restarted worker serves what the others serve";
  EXPECT_TRUE(waitForAppliedAtLeast("steady", outcome.version));
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 4) << "one of the trainer's steps was aborted";
}

// A round aborted while a worker's engine still drains its requests (`wait` mode; here by the pause timeout that
// drain runs past) withdraws the pause: the engine goes back to generating at once, and the worker takes the next
// round. Before, the agent read nothing until the drain ended (here about 80 minutes), so the next round timed out
// too.
TEST_F(RoundFixture, ARoundAbortedWhileTheEngineDrainsWithdrawsItsPause) {
  startCoordinator({"--pause-timeout-ms", "1000"});
  const std::string workerLog = path("slow.log");
  auto worker = startWorker("slow", {"--tokens", "1000000", "--concurrency", "1", "--log-level", "info"}, workerLog);
  waitForAgents(1);
  auto waiting = startTrainer("t0", {"--steps", "1", "--pause-mode", "wait"});
  const auto timedOut = nextOutcome();
  EXPECT_FALSE(timedOut.committed);
  EXPECT_EQ(timedOut.reason, msg::AbortReason::Timeout) << timedOut.detail;
  EXPECT_EQ(waiting.wait(kPatience), 4) << "its step was not committed";
  auto keeping = startTrainer("t1", {"--steps", "1", "--pause-mode", "keep"});
  const auto next = nextOutcome();
  EXPECT_TRUE(next.committed) << next.detail;
  EXPECT_EQ(keeping.wait(kPatience), 0);
  EXPECT_TRUE(waitForAppliedAtLeast("slow", 1));
  EXPECT_THAT(readTextFile(workerLog),
              HasSubstr("the bus withdrew the pause for round 1 while the engine quiesced: generation goes on"));
  worker.signal(SIGTERM);
  EXPECT_EQ(worker.wait(kPatience), 0);
}

TEST_F(RoundFixture, ATrainerKilledMidRoundAbortsItAndANewTrainerContinues) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto doomed = startTrainer("t0", {"--steps", "3", "--fault", "kill@transfer:2"});
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied);
  EXPECT_EQ(aborted.agentId, "t0");
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL);
  EXPECT_EQ(appliedVersion("w0"), 1U);
  auto successor = startTrainer("t0", {"--steps", "2"});
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_EQ(successor.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 3));
}

TEST_F(RoundFixture, APayloadWhoseDigestDiffersIsNeverApplied) {
  startCoordinator();
  auto honest = startWorker("honest");
  auto corrupted = startWorker("corrupted", {"--fault", "corrupt-receive@2"});
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "2"});
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::DigestMismatch);
  EXPECT_EQ(aborted.agentId, "corrupted");
  EXPECT_EQ(trainer.wait(kPatience), 4);
  EXPECT_EQ(appliedVersion("corrupted"), 1U);
  EXPECT_EQ(appliedVersion("honest"), 1U);
  EXPECT_EQ(block_->committedVersion(), 1U);
}

TEST_F(RoundFixture, AgentsReconnectToARestartedCoordinatorAndContinue) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "0", "--interval-ms", "50"});
  EXPECT_TRUE(nextOutcome().committed);
  const auto before = nextOutcome();
  ASSERT_TRUE(before.committed);
  coordinator_->signal(SIGKILL);
  ASSERT_EQ(coordinator_->wait(kPatience), 128 + SIGKILL);
  startCoordinator();
  waitForAgents(2);
  // The new coordinator carries the committed version on from the dead one's control block, and the rounds go on
  // above it.
  std::optional<RoundOutcome> committed;
  for (int attempt = 0; attempt < 5 && !committed; ++attempt) {
    auto outcome = nextOutcome();
    if (outcome.committed) committed = outcome;
  }
  ASSERT_TRUE(committed);
  // Not necessarily above: killed right after publishing the commit event (on its own I/O thread) but before its
  // Commit messages left, the old coordinator committed `before` for the monitors only; the trainer saw its round
  // end with the restart and publishes that version again (docs/decisions.md). Never below.
  EXPECT_GE(committed->version, before.version);
  EXPECT_TRUE(waitForApplied("w0", committed->version) || appliedVersion("w0").value_or(0) > committed->version);
  trainer.signal(SIGTERM);
  EXPECT_THAT(trainer.wait(kPatience), ::testing::AnyOf(0, 4));
}

TEST_F(RoundFixture, ARogueClientLeavesTheCoordinatorUpAndHonestAgentsUnaffected) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "0", "--interval-ms", "20"});
  EXPECT_TRUE(nextOutcome().committed);

  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  zmq::socket_t rogue(context_, zmq::socket_type::dealer);
  rogue.set(zmq::sockopt::linger, 0);
  rogue.connect(endpoints->requests);
  // Garbage, an empty frame, a multipart message, a hello from another protocol, a BeginUpdate and a Commit from a
  // connection that never registered, and a hello claiming the trainer's id.
  rogue.send(zmq::buffer(std::string("not a flatbuffer at all")), zmq::send_flags::none);
  rogue.send(zmq::message_t(), zmq::send_flags::none);
  rogue.send(zmq::buffer(std::string("a")), zmq::send_flags::sndmore);
  rogue.send(zmq::buffer(std::string("b")), zmq::send_flags::none);
  auto sendSpan = [&](std::span<const std::uint8_t> bytes) {
    rogue.send(zmq::const_buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
  };
  bus::MessageBuilder builder;
  auto& fbb = builder.fbb();
  sendSpan(builder.finish(msg::CreateAgentHello(fbb, fbb.CreateString("rogue"), msg::Role::Worker, 99)));
  builder.reset();
  const msg::Digest128 digest(1, 2);
  sendSpan(builder.finish(msg::CreateBeginUpdate(fbb, 1'000'000, 0, &digest)));
  builder.reset();
  sendSpan(builder.finish(msg::CreateCommit(fbb, 1, 1'000'000)));
  builder.reset();
  sendSpan(
      builder.finish(msg::CreateAgentHello(fbb, fbb.CreateString("t0"), msg::Role::Trainer, bus::kProtocolVersion, -1,
                                           1, static_cast<std::uint32_t>(::getpid()), fbb.CreateString("elsewhere"))));
  // Each refusal comes back as an Error naming the problem.
  std::vector<msg::ErrorCode> codes;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (codes.size() < 7 && std::chrono::steady_clock::now() < deadline) {
    zmq::message_t reply;
    if (!rogue.recv(reply, zmq::recv_flags::dontwait)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    auto message = bus::Message::decode(std::move(reply));
    ASSERT_TRUE(message);
    ASSERT_NE(message->as<msg::Error>(), nullptr);
    codes.push_back(message->as<msg::Error>()->code());
  }
  std::string seen;
  for (const auto code : codes) seen += std::string(msg::EnumNameErrorCode(code)) + " ";
  EXPECT_THAT(codes, ::testing::IsSupersetOf({msg::ErrorCode::Malformed, msg::ErrorCode::ProtocolMismatch,
                                              msg::ErrorCode::UnknownAgent, msg::ErrorCode::DuplicateAgent}))
      << "errors seen: " << seen;
  // The coordinator is up, the rounds go on and the worker follows them.
  EXPECT_FALSE(coordinator_->wait(std::chrono::milliseconds(0)));
  std::uint64_t version = 0;
  for (int round = 0; round < 3; ++round) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    version = outcome.version;
  }
  EXPECT_LT(version, 1'000'000U);
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", block_->committedVersion()));
}

TEST_F(RoundFixture, ASecondCoordinatorRefusesToStart) {
  startCoordinator();
  auto second = ChildProcess::spawn(WSYNC_COORDINATOR_BIN, {"--bus", bus_});
  EXPECT_EQ(second.wait(kPatience), 3);
  EXPECT_FALSE(coordinator_->wait(std::chrono::milliseconds(0))) << "the first coordinator must stay up";
}

// Issue 13, 9: one coordinator per bus name on a host, whatever its runtime folder, even once the first one's
// control segment was unlinked.
TEST_F(RoundFixture, ASecondCoordinatorRefusesToStartWhateverItsRuntimeFolder) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  ASSERT_EQ(::shm_unlink(("/" + bus::controlBlockSegmentName(bus_)).c_str()), 0);
  const std::string otherRuntime = path("other-runtime");
  std::filesystem::create_directories(otherRuntime);
  std::filesystem::permissions(otherRuntime, std::filesystem::perms::owner_all);
  auto second =
      ChildProcess::spawn("/usr/bin/env", {"WSYNC_RUNTIME_DIR=" + otherRuntime, WSYNC_COORDINATOR_BIN, "--bus", bus_},
                          {.stderrFile = path("second.log")});
  EXPECT_EQ(second.wait(kPatience), 3);
  EXPECT_THAT(readTextFile(path("second.log")), HasSubstr("pid " + std::to_string(coordinator_->pid())));
  EXPECT_FALSE(coordinator_->wait(std::chrono::milliseconds(0))) << "the first coordinator must stay up";
  // No second block was made under the name: an agent that registers now cannot be sent to another's block.
  EXPECT_FALSE(bus::ControlBlockView::open(bus_));
}

// A coordinator killed after it committed a version but before it told anyone (issue 13: "every state has an owner"):
// the next coordinator carries the commit, digest included, on from the dead one's block; the workers that staged it
// apply it as they register again, and the trainer learns it was committed, with no further round.
TEST_F(RoundFixture, ACommitWhoseCoordinatorDiedBeforeTellingIsAppliedAndReported) {
  startCoordinator({"--fault", "kill@commit:2"});
  auto w0 = startWorker("w0");
  auto w1 = startWorker("w1");
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "2"}, path("trainer.log"));
  // Round 1's Commit is not awaited on the bus: the fault strikes a few ms after it was published, and a SIGKILL can
  // take a message still queued in the dead coordinator's ZeroMQ I/O thread with it (CI saw exactly that). The block,
  // written before either publish, is the record.
  ASSERT_EQ(coordinator_->wait(kPatience), 128 + SIGKILL) << "the commit fault never struck";
  startCoordinator();
  EXPECT_EQ(block_->committedVersion(), 2U);
  EXPECT_TRUE(waitForApplied("w0", 2));
  EXPECT_TRUE(waitForApplied("w1", 2));
  EXPECT_EQ(trainer.wait(kPatience), 0) << "the trainer must learn that version 2 was committed";
  EXPECT_THAT(readTextFile(path("trainer.log")), HasSubstr("Committed"));
  EXPECT_EQ(block_->roundState().round, 0U) << "no round ran after the restart";
}

// Issue 13, 5: a trainer refused for a version another trainer committed meanwhile goes on above the bus's committed
// version (every refusal carries it) instead of retrying the refused one for good.
TEST_F(RoundFixture, ATrainerGoesOnAboveVersionsAnotherTrainerCommitted) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto slow = startTrainer("slow", {"--steps", "3", "--interval-ms", "3000"}, path("slow.log"));
  auto first = nextOutcome();
  ASSERT_TRUE(first.committed) << first.detail;
  ASSERT_EQ(first.version, 1U);
  // While the slow trainer waits between its steps, another commits three versions.
  auto fast = startTrainer("fast", {"--steps", "3"});
  for (std::uint64_t version = 2; version <= 4; ++version) {
    const auto outcome = nextOutcome();
    ASSERT_TRUE(outcome.committed) << outcome.detail;
    ASSERT_EQ(outcome.version, version);
  }
  ASSERT_EQ(fast.wait(kPatience), 0);
  // The slow trainer's next step is refused (version 2 is not above 4) and the one after publishes version 5.
  const auto outcome = nextOutcome();
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_EQ(outcome.version, 5U);
  EXPECT_EQ(slow.wait(kPatience), 4) << "one step was refused";
  EXPECT_THAT(readTextFile(path("slow.log")), HasSubstr("VersionNotIncreasing"));
}

// Issue 13, 5: SIGTERM stops a trainer that waits for an outcome that does not come (its coordinator is frozen).
TEST_F(RoundFixture, ATrainerWaitingForAnOutcomeStopsOnSigterm) {
  startCoordinator({"--fault", "stop@transfer:2"});
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "0", "--interval-ms", "20"}, path("trainer.log"));
  ASSERT_TRUE(nextOutcome().committed);
  // The coordinator stops itself once version 2's transfer plans are out; the trainer waits for the outcome.
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (readTextFile("/proc/" + std::to_string(coordinator_->pid()) + "/stat").find(") T ") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the coordinator's stop fault never struck";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto signalled = std::chrono::steady_clock::now();
  trainer.signal(SIGTERM);
  EXPECT_TRUE(trainer.wait(kPatience).has_value()) << "the trainer ignored SIGTERM";
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(5));
  coordinator_->signal(SIGCONT);
}

TEST_F(RoundFixture, ALiveAgentIdIsNotTakenTwice) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  zmq::context_t context(1);
  bus::SessionOptions options;
  options.bus = bus_;
  options.agentId = "w0";
  options.role = msg::Role::Worker;
  options.registrationTimeout = std::chrono::milliseconds(1000);
  auto session = bus::AgentSession::open(context, options);
  ASSERT_TRUE(session);
  auto registration = (*session)->registerAgent(0);
  ASSERT_FALSE(registration);
  EXPECT_THAT(registration.error().detail, HasSubstr("held by a live agent"));
}

TEST_F(RoundFixture, AFrozenWorkerIsDeclaredDeadByItsHeartbeatAndRejoinsWhenItThaws) {
  startCoordinator();
  auto steady = startWorker("steady");
  auto frozen = startWorker("frozen");
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "0", "--interval-ms", "100"});
  EXPECT_TRUE(nextOutcome().committed);
  frozen.signal(SIGSTOP);  // alive to the kernel, silent to the bus
  std::optional<RoundOutcome> aborted;
  for (int round = 0; round < 5 && !aborted; ++round) {
    auto outcome = nextOutcome();
    if (!outcome.committed) aborted = outcome;
  }
  ASSERT_TRUE(aborted);
  EXPECT_EQ(aborted->reason, msg::AbortReason::AgentDied);
  EXPECT_EQ(aborted->agentId, "frozen");
  EXPECT_THAT(aborted->detail, HasSubstr("no heartbeat"));
  EXPECT_TRUE(nextOutcome().committed) << "the rounds go on without it";
  frozen.signal(SIGCONT);
  // Its next heartbeat is refused as unknown; it registers again and the next round brings it up to date.
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  bool caughtUp = false;
  while (!caughtUp && std::chrono::steady_clock::now() < deadline) {
    const auto outcome = nextOutcome();
    caughtUp = outcome.committed && waitForApplied("frozen", outcome.version, std::chrono::seconds(5));
  }
  EXPECT_TRUE(caughtUp);
  trainer.signal(SIGTERM);
  EXPECT_THAT(trainer.wait(kPatience), ::testing::AnyOf(0, 4));
}

TEST_F(RoundFixture, ALateJoinerGetsASnapshotAndThenTheEventsAfterIt) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto first = startTrainer("t0", {"--steps", "2"});
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_EQ(first.wait(kPatience), 0);

  // Subscribe first, then ask for the snapshot: events numbered after it follow without a gap.
  auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  std::optional<bus::Received> firstLate;
  auto late = subscribeLive(context_, endpoints->events, {std::string(bus::topics::kRound)}, firstLate);
  ASSERT_TRUE(late) << late.error();
  zmq::socket_t requester(context_, zmq::socket_type::dealer);
  requester.set(zmq::sockopt::linger, 0);
  requester.connect(endpoints->requests);
  bus::MessageBuilder builder;
  const auto request = builder.finish(msg::CreateSnapshotRequest(builder.fbb()));
  requester.send(zmq::const_buffer(request.data(), request.size()), zmq::send_flags::none);
  zmq::message_t frame;
  requester.set(zmq::sockopt::rcvtimeo, static_cast<int>(std::chrono::milliseconds(kPatience).count()));
  ASSERT_TRUE(requester.recv(frame));
  auto reply = bus::Message::decode(std::move(frame));
  ASSERT_TRUE(reply);
  const auto* snapshot = reply->as<msg::SnapshotReply>();
  ASSERT_NE(snapshot, nullptr);
  EXPECT_EQ(snapshot->committed_version(), 2U);
  EXPECT_EQ(snapshot->epoch(), block_->epoch());
  EXPECT_EQ(snapshot->phase(), msg::RoundPhase::Idle);
  ASSERT_NE(snapshot->agents(), nullptr);
  ASSERT_EQ(snapshot->agents()->size(), 1U);  // the trainer left with a goodbye
  EXPECT_EQ(snapshot->agents()->Get(0)->agent_id()->str(), "w0");
  EXPECT_EQ(snapshot->agents()->Get(0)->applied_version(), 2U);
  std::uint64_t roundSeq = 0;
  ASSERT_NE(snapshot->event_sequences(), nullptr);
  for (const auto* sequence : *snapshot->event_sequences()) {
    if (sequence->family()->str() == "round/") roundSeq = sequence->seq();
  }
  EXPECT_GT(roundSeq, 0U);

  auto second = startTrainer("t1", {"--steps", "1"});
  EXPECT_EQ(second.wait(kPatience), 0);
  // The first round event after the snapshot; beats ("bus/") are numbered in their own family.
  std::optional<bus::Message> firstRoundEvent;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!firstRoundEvent && std::chrono::steady_clock::now() < deadline) {
    auto received = late->receive(std::chrono::milliseconds(50));
    ASSERT_TRUE(received);
    if (*received && (*received)->source.starts_with(bus::topics::kRound) && (*received)->message) {
      firstRoundEvent = std::move(*(*received)->message);
    }
  }
  ASSERT_TRUE(firstRoundEvent);
  EXPECT_EQ(firstRoundEvent->seq(), roundSeq + 1) << "the first event after the snapshot follows it";
}

}  // namespace
}  // namespace wsync::test
