// The coordinator's round machine (coordinator/src/round_machine.hpp, docs/update-round.md) alone, in one thread:
// its outbox writes to a recording wire, its channels are fake owners, its clock is moved by hand and its agents
// are records in a real registry. Each test drives a round by calling the machine as the coordinator's loop would
// (begin, pauseAck, updateDone, trainerAbort, agentGone, checkDeadline) and reads what it sent, what it published,
// what it wrote into the control block and what it asked of the channel's owner. No socket, no process, no sleep:
// a deadline passes when the test moves the clock past it.
#include <gtest/gtest.h>

#include <string>

#include "round_machine_fixture.hpp"

namespace wsync::coordinator {
namespace {

using namespace round_test;

// ---- every phase of a round that commits ----

TEST_F(RoundMachineTest, BeginPausesEveryWorkerWithTheManifestFirst) {
  const std::uint64_t round = begin({.version = 5, .mode = msg::PauseMode::Wait});
  EXPECT_EQ(round, 1u);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  EXPECT_EQ(wire_.topics(), (Names{"round/begin", "round/pause"}));
  // The pause word before any message: engines polling it pause without one.
  EXPECT_EQ(block_->pauseState(), (bus::PauseState{true, msg::PauseMode::Wait, round}));
  EXPECT_EQ(block_->roundState(), (bus::RoundState{msg::RoundPhase::Pause, round}));
  for (const char* worker : {"w0-conn", "w1-conn"}) {
    EXPECT_EQ(wire_.bodiesTo(worker), (Names{"Manifest", "Pause"})) << worker;
    const auto* pause = wire_.last<msg::Pause>(worker);
    ASSERT_NE(pause, nullptr);
    EXPECT_EQ(pause->round(), round);
    EXPECT_EQ(pause->version(), 5u);
    EXPECT_EQ(pause->mode(), msg::PauseMode::Wait);
    EXPECT_EQ(bus::fromMessage(*pause->manifest_digest()), manifest_.digest());
  }
  EXPECT_TRUE(wire_.bodiesTo("trainer-conn").empty()) << "the trainer takes no part in the pause";
  // The owner prepared the round's channel for the trainer and the workers in rank order.
  ASSERT_EQ(shmLog_.prepared.size(), 1u);
  EXPECT_EQ(shmLog_.prepared[0].sender, "trainer");
  EXPECT_EQ(shmLog_.prepared[0].receivers, (Names{"worker-0", "worker-1"}));
  EXPECT_EQ(machine().fateOf(5).fate, msg::VersionFate::InProgress);
}

TEST_F(RoundMachineTest, TransferBeginsOnlyWhenEveryWorkerAckedAndPlansReachReceiversBeforeTheTrainer) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, true));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), Names{});
  machine().pauseAck(agent("w1-conn"), pauseAck(round, true));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  EXPECT_EQ(wire_.topics().back(), "round/transfer");
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), (Names{"w0-conn", "w1-conn", "trainer-conn"}));
  const auto* trainerPlan = wire_.last<msg::TransferPlan>("trainer-conn");
  ASSERT_NE(trainerPlan, nullptr);
  EXPECT_EQ(trainerPlan->receiver(), -1);
  EXPECT_EQ(trainerPlan->receiver_count(), 2u);
  EXPECT_EQ(trainerPlan->total_bytes(), manifest_.totalBytes());
  EXPECT_EQ(trainerPlan->bucket_bytes(), kBucketBytes);
  EXPECT_EQ(trainerPlan->bucket_count(), 2u);
  EXPECT_EQ(text(trainerPlan->arena()), "arena-segment");
  EXPECT_EQ(trainerPlan->nccl_rank(), -1) << "the shm grant is not ranked";
  const auto* secondPlan = wire_.last<msg::TransferPlan>("w1-conn");
  ASSERT_NE(secondPlan, nullptr);
  EXPECT_EQ(secondPlan->receiver(), 1);
}

TEST_F(RoundMachineTest, VerifyCommitsAndResumesInOrderWhenEveryDigestAgrees) {
  const std::uint64_t round = begin({.version = 3, .label = "step-3"});
  ackAll(round);
  wire_.clear();
  const std::uint64_t bytes = manifest_.totalBytes();
  machine().updateDone(agent("w0-conn"), updateDone(round, true, bytes, kPayloadDigest));
  machine().updateDone(agent("trainer-conn"), updateDone(round, true, bytes, kPayloadDigest));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer) << "worker-1 has not reported";
  machine().updateDone(agent("w1-conn"), updateDone(round, true, bytes, kPayloadDigest));

  EXPECT_EQ(wire_.topics(), (Names{"round/verify", "round/commit", "round/resume", "round/idle"}));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  EXPECT_EQ(block_->committedVersion(), 3u);
  EXPECT_EQ(block_->committedRound(), round);
  EXPECT_FALSE(block_->pauseState().paused);
  EXPECT_EQ(machine().committed().version, 3u);
  EXPECT_EQ(machine().committed().label, "step-3");
  EXPECT_EQ(machine().committed().digest, kPayloadDigest);
  // The trainer hears of the commit first; every worker gets the Commit, then the Resume at the new version.
  EXPECT_EQ(wire_.peersOf<msg::Commit>(), (Names{"trainer-conn", "w0-conn", "w1-conn"}));
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Commit", "Resume"}));
  EXPECT_EQ(wire_.bodiesTo("trainer-conn"), (Names{"Commit"}));
  const auto* commit = wire_.last<msg::Commit>("w1-conn");
  ASSERT_NE(commit, nullptr);
  EXPECT_EQ(commit->version(), 3u);
  EXPECT_EQ(commit->bytes(), bytes);
  EXPECT_EQ(bus::fromMessage(*commit->digest()), kPayloadDigest);
  EXPECT_EQ(text(commit->label()), "step-3");
  EXPECT_EQ(wire_.last<msg::Resume>("w1-conn")->version(), 3u);
  EXPECT_EQ(stats_.roundsCommitted, 1u);
  EXPECT_TRUE(shmLog_.aborted.empty());
  EXPECT_EQ(machine().fateOf(3).fate, msg::VersionFate::Committed);
  EXPECT_EQ(block_->eventsPublished(), wire_.published()) << "the outbox counts its events in the block";
}

TEST_F(RoundMachineTest, ALaterRoundRefersToTheManifestByDigestAndSendsItToNobodyAgain) {
  std::uint64_t round = begin({.version = 1});
  ackAll(round);
  doneAll(round);
  wire_.clear();
  round = begin({.version = 2, .withManifest = false});
  EXPECT_EQ(round, 2u);
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Pause"}));
  // A worker that registers later is sent it once, in its first round.
  addAgent("w2-conn", "worker-2", msg::Role::Worker, 2);
  ackAll(round);
  doneAll(round);
  wire_.clear();
  round = begin({.version = 3, .withManifest = false});
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Pause"}));
  EXPECT_EQ(wire_.bodiesTo("w2-conn"), (Names{"Manifest", "Pause"}));
}

TEST_F(RoundMachineTest, ARoundWithoutWorkersGoesStraightToTransferAndCommits) {
  agents_.remove("w0-conn");
  agents_.remove("w1-conn");
  const std::uint64_t round = begin({.version = 4});
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), (Names{"trainer-conn"}));
  EXPECT_EQ(wire_.last<msg::TransferPlan>("trainer-conn")->receiver_count(), 0u);
  machine().updateDone(agent("trainer-conn"), updateDone(round, true, manifest_.totalBytes(), kPayloadDigest));
  EXPECT_EQ(block_->committedVersion(), 4u);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
}

TEST_F(RoundMachineTest, ADeviceChannelCutsTheGpuBucketsAndRanksTheMembers) {
  const std::uint64_t round = begin({.channel = msg::ChannelKind::Nccl});
  EXPECT_TRUE(shmLog_.prepared.empty());
  ASSERT_EQ(gpuLog_.prepared.size(), 1u);
  ackAll(round);
  const auto* plan = wire_.last<msg::TransferPlan>("w1-conn");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->channel(), msg::ChannelKind::Nccl);
  EXPECT_EQ(plan->bucket_bytes(), kGpuBucketBytes);
  EXPECT_EQ(plan->bucket_count(), 1u);
  EXPECT_EQ(plan->nccl_rank(), 2) << "the trainer is rank 0, receiver i rank i + 1";
  EXPECT_EQ(plan->nccl_world_size(), 3u);
  ASSERT_NE(plan->nccl_unique_id(), nullptr);
  EXPECT_EQ(plan->nccl_unique_id()->size(), 3u);
  EXPECT_EQ(wire_.last<msg::TransferPlan>("trainer-conn")->nccl_rank(), 0);
}

TEST_F(RoundMachineTest, AWorkerThatRegistersDuringARoundJoinsTheNextOne) {
  const std::uint64_t round = begin();
  addAgent("late-conn", "late", msg::Role::Worker, 2);
  ackAll(round);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer) << "the late worker is not waited for";
  EXPECT_TRUE(wire_.bodiesTo("late-conn").empty());
  EXPECT_EQ(machine().current()->participants.size(), 2u);
}

// ---- what a BeginUpdate is refused for: no round starts, nobody pauses ----

class RoundMachineRefusalTest : public RoundMachineTest {
 protected:
  // The Error the trainer got for its BeginUpdate (seq 7), after checking that nothing else happened.
  Refusal refusal() {
    EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
    EXPECT_FALSE(block_->pauseState().paused);
    EXPECT_TRUE(wire_.bodiesTo("w0-conn").empty());
    EXPECT_TRUE(wire_.events.empty());
    const auto* error = wire_.last<msg::Error>("trainer-conn");
    if (error == nullptr) return Refusal{msg::ErrorCode::None, "no Error was sent"};
    EXPECT_EQ(error->in_reply_to(), 7u);
    return Refusal{error->code(), text(error->detail())};
  }
  void refusedFor(const BeginFields& fields, msg::ErrorCode code, const std::string& part) {
    machine().begin(agent("trainer-conn"), 7, beginUpdate(fields));
    const Refusal got = refusal();
    EXPECT_EQ(got.code, code) << got.detail;
    EXPECT_NE(got.detail.find(part), std::string::npos) << got.detail;
    EXPECT_EQ(stats_.requestsRejected, 1u);
  }
};

TEST_F(RoundMachineRefusalTest, AWorkerCannotBegin) {
  machine().begin(agent("w0-conn"), 7, beginUpdate({}));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* error = wire_.last<msg::Error>("w0-conn");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code(), msg::ErrorCode::NotAllowed);
}

TEST_F(RoundMachineRefusalTest, ASecondRoundWhileOneRunsNamesTheRunningOne) {
  begin({.version = 1});
  wire_.clear();
  machine().begin(agent("trainer-conn"), 7, beginUpdate({.version = 2}));
  const auto* error = wire_.last<msg::Error>("trainer-conn");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code(), msg::ErrorCode::RoundInProgress);
  EXPECT_EQ(text(error->detail()), "round 1 (version 1 from 'trainer') is in phase Pause");
  EXPECT_EQ(machine().current()->version, 1u);
}

TEST_F(RoundMachineRefusalTest, AVersionNotAboveTheCommittedOne) {
  machine().carryOver(CommittedVersion{9, 4, kPayloadDigest, {}, {}}, 6);
  refusedFor({.version = 9}, msg::ErrorCode::VersionNotIncreasing, "not above the committed version 9");
}

TEST_F(RoundMachineRefusalTest, AVersionAboveTheHighestABusTakes) {
  refusedFor({.version = bus::kMaxVersion + 1}, msg::ErrorCode::InvalidField, "above the highest a bus takes");
}

TEST_F(RoundMachineRefusalTest, ALabelThatIsNotPrintable) {
  refusedFor({.label = "bad\x01label"}, msg::ErrorCode::InvalidField, "label");
}

TEST_F(RoundMachineRefusalTest, AManifestNeverSent) {
  refusedFor({.withManifest = false}, msg::ErrorCode::UnknownManifest, "send it with BeginUpdate");
}

TEST_F(RoundMachineRefusalTest, AManifestWhoseDigestIsNotTheRoundsOne) {
  refusedFor({.digest = bus::Digest{1, 1}}, msg::ErrorCode::Malformed, "differs from the round's");
}

TEST_F(RoundMachineRefusalTest, ATotalThatIsNotTheManifests) {
  refusedFor({.totalBytes = 17}, msg::ErrorCode::Malformed, "total_bytes 17 but the manifest has 4352");
}

TEST_F(RoundMachineRefusalTest, AChannelAWorkerDoesNotOfferNamesTheWorker) {
  agents_.remove("w1-conn");
  addAgent("w1-conn", "worker-1", msg::Role::Worker, 1, {msg::ChannelKind::Shm});
  refusedFor({.channel = msg::ChannelKind::Nccl}, msg::ErrorCode::NotAllowed,
             "worker 'worker-1' cannot use channel nccl (it offers shm)");
  EXPECT_TRUE(gpuLog_.prepared.empty());
}

TEST_F(RoundMachineRefusalTest, AChannelThisCoordinatorHasNoOwnerFor) {
  agents_.remove("w0-conn");
  agents_.remove("w1-conn");
  refusedFor({.channel = msg::ChannelKind::Tcp}, msg::ErrorCode::NotAllowed, "unknown to this coordinator");
}

TEST_F(RoundMachineRefusalTest, AnAgentOnAnotherHostOnAChannelThatStaysOnOne) {
  AgentRecord* worker = agents_.find("w1-conn");
  worker->sameHost = false;
  worker->hostname = "elsewhere";
  refusedFor({}, msg::ErrorCode::NotAllowed, "worker 'worker-1' on host 'elsewhere' is on another");
  EXPECT_TRUE(shmLog_.prepared.empty());
}

TEST_F(RoundMachineRefusalTest, WhatTheOwnerRefuses) {
  shmLog_.refuseNextPrepare = "the arena cannot be made";
  refusedFor({}, msg::ErrorCode::NotAllowed, "the arena cannot be made");
  EXPECT_EQ(machine().lastRound(), 0u) << "a refused round takes no number";
}

// ---- every abort path: nothing committed, every worker resumed on the version it had ----

TEST_F(RoundMachineTest, AWorkerThatRefusesToPauseAbortsTheRoundNamingIt) {
  const std::uint64_t round = begin({.version = 2});
  machine().pauseAck(agent("w0-conn"), pauseAck(round, true));
  machine().pauseAck(agent("w1-conn"),
                     pauseAck(round, false, msg::AbortReason::ManifestMismatch, "tensor 'head' is bound as F32"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ManifestMismatch);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-1' refused to pause: tensor 'head' is bound as F32");
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  EXPECT_EQ(wire_.topics(), (Names{"round/begin", "round/pause", "round/abort", "round/resume", "round/idle"}));
  EXPECT_EQ(wire_.peersOf<msg::TransferPlan>(), Names{});
  expectAbortedAndResumed(round, 2, false, msg::AbortReason::ManifestMismatch);
}

TEST_F(RoundMachineTest, ARefusalWithoutAReasonCountsAsRefused) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::AgentRefused);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-0' refused to pause: no reason given");
}

TEST_F(RoundMachineTest, AWorkerLackingTheManifestIsSentItAndThePauseAgainOnce) {
  const std::uint64_t round = begin();
  wire_.clear();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false, msg::AbortReason::ManifestMismatch, "unknown", true));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause) << "no abort for a manifest the coordinator can resend";
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Manifest", "Pause"}));
  EXPECT_TRUE(wire_.bodiesTo("w1-conn").empty());
  EXPECT_EQ(wire_.last<msg::Pause>("w0-conn")->round(), round);
  EXPECT_TRUE(machine().current()->participants[0].manifestResent);
  // Once in a round: a second "unknown" is a refusal like any other.
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false, msg::AbortReason::ManifestMismatch, "unknown", true));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ManifestMismatch);
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::ManifestMismatch);
}

TEST_F(RoundMachineTest, AResentManifestThenAnAckGoesOnToTransfer) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false, msg::AbortReason::None, "evicted", true));
  ackAll(round);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  doneAll(round);
  EXPECT_EQ(block_->committedVersion(), 1u);
}

TEST_F(RoundMachineTest, APauseDeadlineAbortsNamingOnlyTheWorkersThatDidNotAck) {
  const std::uint64_t round = begin();
  machine().pauseAck(agent("w0-conn"), pauseAck(round, true));
  clock_.advance(options_.pauseTimeout - 1ms);
  machine().checkDeadline();
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause) << "a millisecond before the pause timeout";
  clock_.advance(1ms);
  machine().checkDeadline();
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Timeout);
  EXPECT_EQ(text(abort->detail()), "phase Pause ran past its timeout; waiting for 'worker-1'");
  EXPECT_EQ(text(abort->agent_id()), "");
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::Timeout);
}

TEST_F(RoundMachineTest, ATransferDeadlineCountsFromTheTransferAndAddsASecondPerGiB) {
  const std::uint64_t round = begin();
  clock_.advance(options_.pauseTimeout - 1ms);  // the pause's time does not count against the transfer's
  ackAll(round);
  machine().updateDone(agent("w0-conn"), updateDone(round, true, manifest_.totalBytes(), kPayloadDigest));
  // The manifest is under 1 GiB, which counts as one.
  clock_.advance(options_.transferTimeout + kTransferTimeoutPerGiB - 1ms);
  machine().checkDeadline();
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  clock_.advance(1ms);
  machine().checkDeadline();
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Timeout);
  EXPECT_EQ(text(abort->detail()), "phase Transfer ran past its timeout; waiting for 'worker-1', trainer 'trainer'");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::Timeout);
}

TEST_F(RoundMachineTest, NoDeadlineWithoutARoundAndNoneAfterItEnded) {
  machine().checkDeadline();
  const std::uint64_t round = begin();
  ackAll(round);
  doneAll(round);
  clock_.advance(24h);
  machine().checkDeadline();
  EXPECT_EQ(stats_.roundsAborted, 0u);
  EXPECT_EQ(block_->committedVersion(), 1u);
}

TEST_F(RoundMachineTest, ATransferFailureOfTheTrainerAbortsNamingIt) {
  const std::uint64_t round = begin();
  ackAll(round);
  machine().updateDone(agent("trainer-conn"), updateDone(round, false, 0, {}, msg::AbortReason::None, "bucket 1"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ChannelFailure);
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer' failed the transfer: bucket 1");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::ChannelFailure);
}

TEST_F(RoundMachineTest, ATransferFailureOfAWorkerKeepsItsReason) {
  const std::uint64_t round = begin();
  ackAll(round);
  machine().updateDone(agent("w1-conn"), updateDone(round, false, 0, {}, msg::AbortReason::Timeout, "stalled"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Timeout);
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::Timeout);
}

TEST_F(RoundMachineTest, ADigestMismatchAbortsInVerifyAndCommitsNothing) {
  const std::uint64_t round = begin();
  ackAll(round);
  doneAll(round, kSpoiledDigest);
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::DigestMismatch);
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  EXPECT_NE(text(abort->detail()).find("worker 'worker-1' received bytes with digest"), std::string::npos);
  EXPECT_EQ(wire_.peersOf<msg::Commit>(), Names{});
  const Names topics = wire_.topics();
  EXPECT_EQ(Names(topics.end() - 4, topics.end()),
            (Names{"round/verify", "round/abort", "round/resume", "round/idle"}));
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::DigestMismatch);
}

TEST_F(RoundMachineTest, AWorkerThatReceivedAnotherByteCountAbortsInVerify) {
  const std::uint64_t round = begin();
  ackAll(round);
  const std::uint64_t bytes = manifest_.totalBytes();
  machine().updateDone(agent("w0-conn"), updateDone(round, true, bytes - 256, kPayloadDigest));
  machine().updateDone(agent("w1-conn"), updateDone(round, true, bytes, kPayloadDigest));
  machine().updateDone(agent("trainer-conn"), updateDone(round, true, bytes, kPayloadDigest));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ByteCountMismatch);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-0' received 4096 bytes, the trainer sent 4352");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::ByteCountMismatch);
}

TEST_F(RoundMachineTest, ATrainerThatSentAnotherByteCountThanTheManifestAbortsInVerify) {
  const std::uint64_t round = begin();
  ackAll(round);
  for (const char* agentConn : {"w0-conn", "w1-conn", "trainer-conn"}) {
    machine().updateDone(agent(agentConn), updateDone(round, true, 100, kPayloadDigest));
  }
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ByteCountMismatch);
  EXPECT_EQ(text(abort->agent_id()), "trainer");
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer' sent 100 bytes, the manifest has 4352");
}

TEST_F(RoundMachineTest, AWorkerLostInPauseAbortsAndIsNotSentTheAbortOrTheResume) {
  const std::uint64_t round = begin();
  wire_.clear();
  // The coordinator removes a dead agent from the registry, then tells the machine.
  const auto gone = agents_.remove("w1-conn");
  ASSERT_TRUE(gone.has_value());
  machine().agentGone(*gone, "its heartbeat is 2000 ms old");
  EXPECT_TRUE(wire_.bodiesTo("w1-conn").empty());
  ASSERT_NE(wire_.last<msg::Abort>("trainer-conn"), nullptr);
  const auto* abort = wire_.last<msg::Abort>("w0-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::AgentDied);
  EXPECT_EQ(text(abort->detail()), "worker 'worker-1': its heartbeat is 2000 ms old");
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::AgentDied);
}

TEST_F(RoundMachineTest, AWorkerLostMidTransferAbortsTheTransfer) {
  const std::uint64_t round = begin();
  ackAll(round);
  machine().updateDone(agent("w1-conn"), updateDone(round, true, manifest_.totalBytes(), kPayloadDigest));
  const auto gone = agents_.remove("w0-conn");
  machine().agentGone(*gone, "its process is gone");
  EXPECT_EQ(wire_.last<msg::Abort>("w1-conn")->reason(), msg::AbortReason::AgentDied);
  EXPECT_EQ(wire_.last<msg::Abort>("w0-conn"), nullptr);
  EXPECT_EQ(wire_.last<msg::Resume>("w0-conn"), nullptr);
  EXPECT_EQ(shmLog_.aborted, (std::vector<test::FakeChannelOwnerLog::Aborted>{{round, true}}));
  EXPECT_EQ(block_->committedVersion(), 0u);
}

TEST_F(RoundMachineTest, TheTrainerLostMidTransferAbortsAndEveryWorkerResumes) {
  const std::uint64_t round = begin();
  ackAll(round);
  const auto gone = agents_.remove("trainer-conn");
  machine().agentGone(*gone, "it said goodbye");
  EXPECT_EQ(wire_.last<msg::Abort>("trainer-conn"), nullptr);
  const auto* abort = wire_.last<msg::Abort>("w0-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::AgentDied);
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer': it said goodbye");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::AgentDied);
}

TEST_F(RoundMachineTest, AnAgentOutsideTheRoundLeavingChangesNothing) {
  begin();
  const AgentRecord& late = addAgent("late-conn", "late", msg::Role::Worker, 2);
  const AgentRecord copy = late;
  agents_.remove("late-conn");
  machine().agentGone(copy, "it said goodbye");
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  machine().agentGone(agent("w0-conn"), "gone");
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  machine().agentGone(agent("w1-conn"), "gone as well");  // no round: nothing to abort
  EXPECT_EQ(stats_.roundsAborted, 1u);
}

TEST_F(RoundMachineTest, TheTrainersCancelAbortsAsRequested) {
  const std::uint64_t round = begin();
  ackAll(round);
  // Only the round's trainer, and only for its round.
  machine().trainerAbort(agent("w0-conn"), trainerCancel(round, "not mine to cancel"));
  machine().trainerAbort(agent("trainer-conn"), trainerCancel(round + 1, "another round"));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  machine().trainerAbort(agent("trainer-conn"), trainerCancel(round, "the loss went NaN"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Requested);
  EXPECT_EQ(text(abort->detail()), "trainer 'trainer' cancelled: the loss went NaN");
  expectAbortedAndResumed(round, 1, true, msg::AbortReason::Requested);
}

TEST_F(RoundMachineTest, AnOperatorsAbortEndsARoundAndSaysWhenThereIsNone) {
  EXPECT_FALSE(machine().abort(msg::AbortReason::Requested, "an operator aborted the round"));
  const std::uint64_t round = begin();
  EXPECT_TRUE(machine().abort(msg::AbortReason::CoordinatorRestart, "the coordinator is stopping"));
  const msg::Abort* abort = abortSentToAll();
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::CoordinatorRestart);
  expectAbortedAndResumed(round, 1, false, msg::AbortReason::CoordinatorRestart);
}

TEST_F(RoundMachineTest, MessagesOfAnotherRoundOrPhaseOrAgentAreIgnored) {
  const std::uint64_t round = begin();
  addAgent("late-conn", "late", msg::Role::Worker, 2);
  machine().pauseAck(agent("w0-conn"), pauseAck(round + 1, false));         // another round's
  machine().pauseAck(agent("late-conn"), pauseAck(round, false));           // not a participant
  machine().updateDone(agent("w0-conn"), updateDone(round, false, 0, {}));  // not in Transfer yet
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  ackAll(round);
  machine().pauseAck(agent("w0-conn"), pauseAck(round, false));  // a late refusal of a pause already acked
  machine().updateDone(agent("w0-conn"), updateDone(round + 1, false, 0, {}));
  machine().updateDone(agent("late-conn"), updateDone(round, false, 0, {}));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  EXPECT_EQ(stats_.roundsAborted, 0u);
}

// ---- the outbox's side: an agent a command cannot reach ----

TEST_F(RoundMachineTest, AWorkerThePauseCannotReachIsNotedForTheCoordinatorToDrop) {
  wire_.unreachable.push_back("w1-conn");
  begin();
  const std::vector<Unreachable> gone = outbox_->takeUnreachable();
  ASSERT_EQ(gone.size(), 1u) << "once, although the Manifest and the Pause both failed";
  EXPECT_EQ(gone[0].routingId, "w1-conn");
  EXPECT_NE(gone[0].why.find("its connection is gone"), std::string::npos);
  // What the coordinator then does: removes it, and the round aborts on its departure.
  const auto removed = agents_.remove("w1-conn");
  machine().agentGone(*removed, gone[0].why);
  EXPECT_EQ(wire_.last<msg::Abort>("w0-conn")->reason(), msg::AbortReason::AgentDied);
}

// ---- the coordinator around it: faults, versions carried over, fates ----

TEST_F(RoundMachineTest, TheFaultHookIsCalledAtEveryPointAndAnOutageCutsTheRequestEndpoint) {
  faultHook_->outageAt = bus::FaultPoint::Commit;
  const std::uint64_t round = begin({.version = 6});
  ackAll(round);
  doneAll(round);
  EXPECT_EQ(faultHook_->reachedPoints, (Names{"begin@6", "pause@6", "transfer@6", "verify@6", "commit@6", "resume@6"}));
  EXPECT_EQ(cuts_, (Names{"250 ms: test fault at commit"}));
  EXPECT_EQ(block_->committedVersion(), 6u) << "the commit goes on: the machine only asks for the cut";
}

TEST_F(RoundMachineTest, AnAbortedRoundReachesResumeButNotVerifyOrCommit) {
  const std::uint64_t round = begin({.version = 2});
  ackAll(round);
  machine().trainerAbort(agent("trainer-conn"), trainerCancel(round, "stop"));
  EXPECT_EQ(faultHook_->reachedPoints, (Names{"begin@2", "pause@2", "transfer@2", "resume@2"}));
  EXPECT_TRUE(cuts_.empty());
}

TEST_F(RoundMachineTest, ACarriedOverVersionAndRoundNumberGoOn) {
  machine().carryOver(CommittedVersion{9, 4, kPayloadDigest, "old", {}}, 6);
  EXPECT_EQ(machine().committed().version, 9u);
  EXPECT_EQ(machine().lastRound(), 6u);
  EXPECT_EQ(machine().fateOf(9).fate, msg::VersionFate::Committed);
  EXPECT_EQ(machine().fateOf(9).round, 4u);
  const std::uint64_t round = begin({.version = 10});
  EXPECT_EQ(round, 7u);
  machine().abort(msg::AbortReason::Requested, "operator");
  EXPECT_EQ(wire_.last<msg::Resume>("w0-conn")->version(), 9u) << "resumed on the carried-over version";
}

TEST_F(RoundMachineTest, TheFateOfVersionsNeverSeen) {
  machine().carryOver(CommittedVersion{9, 4, kPayloadDigest, {}, {}}, 4);
  EXPECT_EQ(machine().fateOf(12).fate, msg::VersionFate::NotCommitted);
  EXPECT_EQ(machine().fateOf(12).reason, msg::AbortReason::Lost);
  EXPECT_EQ(machine().fateOf(3).fate, msg::VersionFate::Superseded);
}

}  // namespace
}  // namespace wsync::coordinator
