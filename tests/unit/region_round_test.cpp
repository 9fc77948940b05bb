// Region rounds in the coordinator's round machine (coordinator/src/region_round.cpp, docs/regions.md), driven as
// round_machine_test.cpp drives whole rounds: a sharded trainer's ranks begin one by one, the machine plans before
// any engine pauses and refuses what does not fit, and it commits only when every (source, worker) pair agrees.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "round_machine_fixture.hpp"
#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/channel/region_transfer.hpp"

namespace wsync::coordinator {
namespace {

using namespace round_test;

bus::Box box(std::vector<std::int64_t> offset, std::vector<std::int64_t> extent) {
  return bus::Box{std::move(offset), std::move(extent)};
}

class RegionRoundTest : public RoundMachineTest {
 protected:
  RegionRoundTest() { addAgent("t1-conn", "trainer-1", msg::Role::Trainer, 1); }

  // Rank `rank` of two: half of "embed" (64 x 16) by rows, and a replica of "head".
  static bus::SourceHoldings half(std::uint32_t rank) {
    return bus::SourceHoldings{
        {bus::HeldRegion{0, box({32 * rank, 0}, {32, 16})}, bus::HeldRegion{1, box({0, 0}, {16, 8})}}};
  }
  static BeginFields rankFields(std::uint32_t rank, std::uint64_t version = 1) {
    BeginFields fields;
    fields.version = version;
    fields.sourceRank = rank;
    fields.sourceCount = 2;
    fields.holdings = half(rank);
    return fields;
  }
  std::string connOf(std::uint32_t rank) const { return rank == 0 ? "trainer-conn" : "t1-conn"; }
  void beginRank(std::uint32_t rank, const BeginFields& fields) {
    machine().begin(agent(connOf(rank)), 7 + rank, beginUpdate(fields));
  }
  // Both ranks began version 1; the round's id.
  std::uint64_t beginBoth() {
    beginRank(0, rankFields(0));
    beginRank(1, rankFields(1));
    const ActiveRound* round = machine().current();
    if (round == nullptr) throw std::runtime_error("the round did not begin");
    return round->id;
  }
  // The plan the agents compute: the holdings above, the workers' bindings (whole unless set).
  bus::RegionPlan plan() {
    std::vector<bus::ReceiverBindings> bindings;
    for (const char* worker : {"w0-conn", "w1-conn"}) {
      const AgentRecord& record = agent(worker);
      bindings.push_back(record.bindings ? *record.bindings : bus::wholeBindings(manifest_));
    }
    const std::vector<std::string> sources{"s0", "s1"};
    const std::vector<std::string> receivers{"r0", "r1"};
    auto built = bus::RegionPlan::build(manifest_, {half(0), half(1)}, std::move(bindings), sources, receivers);
    if (!built) throw std::runtime_error(built.error().describe());
    return std::move(*built);
  }
  // What pair (source, receiver) moved, as both sides would report it: the plan's bytes, a digest of its own.
  static bus::PairResult pair(const bus::RegionPlan& plan, std::uint32_t source, std::uint32_t receiver) {
    return bus::PairResult{plan.bytes(source, receiver), bus::Digest{source + 1, receiver + 1}};
  }
  bus::RegionTransferResult sentBy(const bus::RegionPlan& plan, std::uint32_t source) {
    return {pair(plan, source, 0), pair(plan, source, 1)};
  }
  bus::RegionTransferResult takenBy(const bus::RegionPlan& plan, std::uint32_t receiver) {
    return {pair(plan, 0, receiver), pair(plan, 1, receiver)};
  }
  void ackAllAndTransfer(std::uint64_t round) { ackAll(round); }
  void reportAll(std::uint64_t round, const bus::RegionPlan& plan) {
    machine().updateDone(agent("w0-conn"), pairsDone(round, takenBy(plan, 0)));
    machine().updateDone(agent("w1-conn"), pairsDone(round, takenBy(plan, 1)));
    machine().updateDone(agent("trainer-conn"), pairsDone(round, sentBy(plan, 0)));
    machine().updateDone(agent("t1-conn"), pairsDone(round, sentBy(plan, 1)));
  }
  const msg::Abort* abortTo(const std::string& peer) { return wire_.last<msg::Abort>(peer); }
};

// ---- a round of two ranks that commits ----

TEST_F(RegionRoundTest, TheFirstRankWaitsInBeginAndNothingPausesUntilTheLastRankBegins) {
  beginRank(0, rankFields(0));
  ASSERT_NE(machine().current(), nullptr);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Begin);
  EXPECT_TRUE(machine().current()->regions);
  EXPECT_TRUE(wire_.bodiesTo("w0-conn").empty()) << "no engine pauses for half a version";
  EXPECT_FALSE(block_->pauseState().paused);
  EXPECT_TRUE(shmLog_.prepared.empty());

  beginRank(1, rankFields(1));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Manifest", "Pause"}));
  ASSERT_EQ(shmLog_.prepared.size(), 1u);
  EXPECT_TRUE(shmLog_.prepared[0].sources);
  EXPECT_EQ(shmLog_.prepared[0].sender, "trainer,trainer-1");
  EXPECT_EQ(shmLog_.prepared[0].receivers, (Names{"worker-0", "worker-1"}));
  EXPECT_EQ(stats_.requestsRejected, 0u);
}

TEST_F(RegionRoundTest, TransferSendsEachAgentTheDeclarationsItLacksThenItsPlan) {
  const std::uint64_t round = beginBoth();
  wire_.clear();
  ackAll(round);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Transfer);
  // Workers: both ranks' holdings, and no bindings (they bind everything whole); each rank the other's holdings.
  for (const char* peer : {"w0-conn", "w1-conn"}) {
    EXPECT_EQ(wire_.bodiesTo(peer), (Names{"Holdings", "Holdings", "TransferPlan"})) << peer;
  }
  for (const char* peer : {"trainer-conn", "t1-conn"}) {
    EXPECT_EQ(wire_.bodiesTo(peer), (Names{"Holdings", "TransferPlan"})) << peer;
  }
  const auto* plan = wire_.last<msg::TransferPlan>("w1-conn");
  ASSERT_NE(plan, nullptr);
  EXPECT_TRUE(plan->regions());
  EXPECT_EQ(plan->receiver(), 1);
  EXPECT_EQ(plan->source(), -1);
  EXPECT_EQ(plan->receiver_count(), 2u);
  ASSERT_NE(plan->holdings_digests(), nullptr);
  ASSERT_EQ(plan->holdings_digests()->size(), 2u);
  EXPECT_EQ(bus::fromMessage(*plan->holdings_digests()->Get(1)), bus::digestOf(half(1)));
  ASSERT_NE(plan->bindings_digests(), nullptr);
  EXPECT_EQ(bus::fromMessage(*plan->bindings_digests()->Get(0)), bus::Digest{}) << "zero: bound whole";
  const auto* sourcePlan = wire_.last<msg::TransferPlan>("t1-conn");
  ASSERT_NE(sourcePlan, nullptr);
  EXPECT_EQ(sourcePlan->source(), 1);
  EXPECT_EQ(sourcePlan->receiver(), -1);
  // Receivers' plans before any source's.
  const Names peers = wire_.peersOf<msg::TransferPlan>();
  EXPECT_EQ(peers, (Names{"w0-conn", "w1-conn", "trainer-conn", "t1-conn"}));

  // The next round names the holdings by digest only.
  reportAll(round, this->plan());
  ASSERT_EQ(machine().phase(), msg::RoundPhase::Idle);
  wire_.clear();
  auto again = rankFields(0, 2);
  again.holdingsByDigest = true;
  beginRank(0, again);
  auto second = rankFields(1, 2);
  second.holdingsByDigest = true;
  beginRank(1, second);
  ackAll(machine().current()->id);
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Pause", "TransferPlan"}));
  EXPECT_EQ(wire_.bodiesTo("t1-conn"), (Names{"TransferPlan"}));
}

TEST_F(RegionRoundTest, EveryPairAgreeingCommitsWithEachWorkersOwnDigest) {
  const std::uint64_t round = beginBoth();
  ackAll(round);
  const bus::RegionPlan planned = plan();
  reportAll(round, planned);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  EXPECT_EQ(machine().committed().version, 1u);
  EXPECT_EQ(stats_.roundsCommitted, 1u);
  for (std::uint32_t receiver = 0; receiver < 2; ++receiver) {
    const std::string peer = receiver == 0 ? "w0-conn" : "w1-conn";
    const auto* commit = wire_.last<msg::Commit>(peer);
    ASSERT_NE(commit, nullptr);
    ASSERT_NE(commit->receiver_digest(), nullptr);
    const auto taken = takenBy(planned, receiver);
    EXPECT_EQ(bus::fromMessage(*commit->receiver_digest()), bus::receiverDigestOf(taken)) << peer;
    EXPECT_EQ(machine().committed().receiverDigests.at(receiver == 0 ? "worker-0" : "worker-1"),
              bus::receiverDigestOf(taken));
  }
  const std::vector<bus::Digest> holdings{bus::digestOf(half(0)), bus::digestOf(half(1))};
  const std::vector<bus::RegionTransferResult> sent{sentBy(planned, 0), sentBy(planned, 1)};
  const bus::Digest version = bus::versionDigestOf(holdings, sent);
  for (const char* source : {"trainer-conn", "t1-conn"}) {
    const auto* commit = wire_.last<msg::Commit>(source);
    ASSERT_NE(commit, nullptr) << source;
    EXPECT_EQ(bus::fromMessage(*commit->digest()), version);
  }
  EXPECT_EQ(block_->committedVersion(), 1u);
  EXPECT_EQ(machine().committed().digest, version);
  // The two workers take different bytes, so their digests differ: neither could apply the other's.
  EXPECT_NE(bus::receiverDigestOf(takenBy(planned, 0)), bus::receiverDigestOf(takenBy(planned, 1)));
}

// ---- what aborts a region round, naming the pair, the rank or the worker ----

TEST_F(RegionRoundTest, APairWhoseDigestsDifferAbortsNamingTheWorkerAndTheRank) {
  const std::uint64_t round = beginBoth();
  ackAll(round);
  const bus::RegionPlan planned = plan();
  auto taken = takenBy(planned, 1);
  taken[1].digest = kSpoiledDigest;
  machine().updateDone(agent("w0-conn"), pairsDone(round, takenBy(planned, 0)));
  machine().updateDone(agent("w1-conn"), pairsDone(round, taken));
  machine().updateDone(agent("trainer-conn"), pairsDone(round, sentBy(planned, 0)));
  machine().updateDone(agent("t1-conn"), pairsDone(round, sentBy(planned, 1)));
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::DigestMismatch);
  const std::string detail = text(abort->detail());
  EXPECT_NE(detail.find("worker 'worker-1'"), std::string::npos) << detail;
  EXPECT_NE(detail.find("trainer rank 1 ('trainer-1')"), std::string::npos) << detail;
  EXPECT_EQ(machine().committed().version, 0u);
  ASSERT_NE(abortTo("t1-conn"), nullptr) << "every rank is told";
  ASSERT_NE(abortTo("w0-conn"), nullptr);
}

TEST_F(RegionRoundTest, ARankThatSentOtherBytesThanThePlanAbortsNamingIt) {
  const std::uint64_t round = beginBoth();
  ackAll(round);
  const bus::RegionPlan planned = plan();
  auto sent = sentBy(planned, 0);
  sent[0].bytes += 4;
  machine().updateDone(agent("w0-conn"), pairsDone(round, takenBy(planned, 0)));
  machine().updateDone(agent("w1-conn"), pairsDone(round, takenBy(planned, 1)));
  machine().updateDone(agent("t1-conn"), pairsDone(round, sentBy(planned, 1)));
  machine().updateDone(agent("trainer-conn"), pairsDone(round, sent));
  const auto* abort = abortTo("w0-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ByteCountMismatch);
  EXPECT_NE(text(abort->detail()).find("trainer rank 0 ('trainer') sent worker 'worker-0'"), std::string::npos)
      << text(abort->detail());
  EXPECT_EQ(text(abort->agent_id()), "trainer");
}

TEST_F(RegionRoundTest, AReportOfTheWrongNumberOfPeersAborts) {
  const std::uint64_t round = beginBoth();
  ackAll(round);
  machine().updateDone(agent("w0-conn"), pairsDone(round, {bus::PairResult{}}));
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_NE(text(abort->detail()).find("worker 'worker-0' reported 1 peers, the round has 2"), std::string::npos)
      << text(abort->detail());
}

TEST_F(RegionRoundTest, ARankThatNeverBeginsIsNamedWhenTheSourcesTimeoutRunsOut) {
  beginRank(0, rankFields(0));
  machine().checkDeadline();
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Begin) << "not yet";
  clock_.advance(options_.sourcesTimeout + 1ms);
  machine().checkDeadline();
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Timeout);
  EXPECT_NE(text(abort->detail()).find("trainer rank 1 (it never began version 1)"), std::string::npos)
      << text(abort->detail());
  EXPECT_TRUE(wire_.bodiesTo("w0-conn").empty()) << "the workers never paused: nothing to tell them";
  EXPECT_FALSE(block_->pauseState().paused);
  EXPECT_EQ(machine().fateOf(1).fate, msg::VersionFate::Aborted);
}

TEST_F(RegionRoundTest, RanksThatBeginDifferentVersionsAbortNamingBoth) {
  beginRank(0, rankFields(0, 3));
  beginRank(1, rankFields(1, 4));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* refusal = wire_.last<msg::Error>("t1-conn");
  ASSERT_NE(refusal, nullptr);
  const std::string detail = text(refusal->detail());
  EXPECT_NE(detail.find("trainer rank 1 ('trainer-1') began version 4, trainer rank 0 ('trainer') 3"),
            std::string::npos)
      << detail;
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::LayoutMismatch);
  EXPECT_EQ(text(abort->detail()), detail);
}

TEST_F(RegionRoundTest, RanksThatDisagreeOnTheirCountOrChannelOrPauseModeAbort) {
  struct Case {
    const char* name;
    void (*vary)(BeginFields&);
    const char* says;
  };
  const Case cases[] = {
      {"count", [](BeginFields& f) { f.sourceCount = 3; }, "began a version of 3 ranks, trainer rank 0 ('trainer') 2"},
      {"channel", [](BeginFields& f) { f.channel = msg::ChannelKind::Nccl; }, "began on channel nccl"},
      {"mode", [](BeginFields& f) { f.mode = msg::PauseMode::Wait; }, "began with pause mode Wait"},
  };
  std::uint64_t version = 1;
  for (const Case& each : cases) {
    SCOPED_TRACE(each.name);
    beginRank(0, rankFields(0, version));
    BeginFields joiner = rankFields(1, version);
    each.vary(joiner);
    beginRank(1, joiner);
    EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
    const auto* abort = abortTo("trainer-conn");
    ASSERT_NE(abort, nullptr);
    EXPECT_NE(text(abort->detail()).find(each.says), std::string::npos) << text(abort->detail());
    ++version;
  }
}

TEST_F(RegionRoundTest, ARankThatBeginsTwiceUnderAnotherIdAborts) {
  addAgent("t2-conn", "trainer-2", msg::Role::Trainer, 2);
  beginRank(0, rankFields(0));
  machine().begin(agent("t2-conn"), 9, beginUpdate(rankFields(0)));
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_NE(text(abort->detail()).find("trainer rank 0 began twice: as 'trainer' and as 'trainer-2'"),
            std::string::npos)
      << text(abort->detail());
}

TEST_F(RegionRoundTest, RanksWhoseRegionsLeaveAGapAbortBeforeAnyEnginePauses) {
  beginRank(0, rankFields(0));
  BeginFields short_ = rankFields(1);
  short_.holdings =
      bus::SourceHoldings{{bus::HeldRegion{0, box({40, 0}, {24, 16})}, bus::HeldRegion{1, box({0, 0}, {16, 8})}}};
  beginRank(1, short_);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::LayoutMismatch);
  EXPECT_NE(text(abort->detail()).find("embed"), std::string::npos) << text(abort->detail());
  EXPECT_NE(text(abort->detail()).find("[32:40, 0:16]"), std::string::npos) << text(abort->detail());
  EXPECT_TRUE(wire_.bodiesTo("w0-conn").empty());
  EXPECT_FALSE(block_->pauseState().paused);
}

TEST_F(RegionRoundTest, AWorkersBindingsThatDoNotFitAbortBeforeAnyEnginePausesNamingIt) {
  AgentRecord* worker = agents_.find("w1-conn");
  worker->bindings = std::make_shared<const bus::ReceiverBindings>(
      bus::ReceiverBindings{{bus::LocalTensor{"local", msg::DType::F32, {8, 16}}},
                            {bus::BoundRegion{"embed", box({60, 0}, {8, 16}), 0, {0, 0}, {8, 16}}}});
  worker->bindingsDigest = bus::digestOf(*worker->bindings);
  beginRank(0, rankFields(0));
  beginRank(1, rankFields(1));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::ManifestMismatch);
  EXPECT_NE(text(abort->detail()).find("worker 'worker-1'"), std::string::npos) << text(abort->detail());
  EXPECT_EQ(text(abort->agent_id()), "worker-1");
  EXPECT_TRUE(wire_.bodiesTo("w0-conn").empty());
}

TEST_F(RegionRoundTest, OneWorkerBindingASliceMakesAWholeTrainersRoundARegionRound) {
  AgentRecord* worker = agents_.find("w1-conn");
  worker->bindings = std::make_shared<const bus::ReceiverBindings>(bus::ReceiverBindings{
      {bus::LocalTensor{"embed.tp1", msg::DType::F32, {64, 8}}, bus::LocalTensor{"head", msg::DType::BF16, {16, 8}}},
      {bus::BoundRegion{"embed", box({0, 8}, {64, 8}), 0, {0, 0}, {64, 8}},
       bus::BoundRegion{"head", box({0, 0}, {16, 8}), 1, {0, 0}, {16, 8}}}});
  worker->bindingsDigest = bus::digestOf(*worker->bindings);
  worker->knownDeclarations.push_back(worker->bindingsDigest);  // as registration records it
  const std::uint64_t round = begin();                          // one source, no holdings declared
  ASSERT_TRUE(machine().current()->regions);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
  wire_.clear();
  ackAll(round);
  // Every agent plans the whole round: worker-1's bindings go to the source and to worker-0, not back to worker-1.
  EXPECT_EQ(wire_.bodiesTo("trainer-conn"), (Names{"Holdings", "Bindings", "TransferPlan"}));
  EXPECT_EQ(wire_.bodiesTo("w0-conn"), (Names{"Holdings", "Bindings", "TransferPlan"}));
  EXPECT_EQ(wire_.bodiesTo("w1-conn"), (Names{"Holdings", "TransferPlan"}));
  const auto* plan = wire_.last<msg::TransferPlan>("trainer-conn");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(bus::fromMessage(*plan->bindings_digests()->Get(1)), worker->bindingsDigest);
  EXPECT_EQ(bus::fromMessage(*plan->holdings_digests()->Get(0)), bus::digestOf(bus::wholeHoldings(manifest_)));
}

TEST_F(RegionRoundTest, HoldingsNamedByADigestTheCoordinatorLacksAreRefusedAsUnknown) {
  BeginFields fields = rankFields(0);
  fields.holdingsByDigest = true;
  beginRank(0, fields);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* refusal = wire_.last<msg::Error>("trainer-conn");
  ASSERT_NE(refusal, nullptr);
  EXPECT_EQ(refusal->code(), msg::ErrorCode::UnknownManifest) << "the trainer agent sends them again on this code";
  EXPECT_NE(text(refusal->detail()).find("holdings"), std::string::npos);
}

TEST_F(RegionRoundTest, ASourceCountOrRankOutOfRangeIsRefused) {
  BeginFields none = rankFields(0);
  none.sourceCount = 0;
  beginRank(0, none);
  EXPECT_EQ(wire_.last<msg::Error>("trainer-conn")->code(), msg::ErrorCode::InvalidField);
  BeginFields past = rankFields(0);
  past.sourceRank = 2;
  beginRank(0, past);
  EXPECT_NE(text(wire_.last<msg::Error>("trainer-conn")->detail()).find("source_rank 2 of 2 sources"),
            std::string::npos);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
}

TEST_F(RegionRoundTest, AChannelThatCarriesNoRegionRoundsAbortsSayingSo) {
  shmTraits_.regions = false;
  beginRank(0, rankFields(0));
  beginRank(1, rankFields(1));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Idle);
  const auto* abort = abortTo("t1-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_NE(text(abort->detail()).find("carries no region rounds"), std::string::npos) << text(abort->detail());
  EXPECT_TRUE(wire_.bodiesTo("w0-conn").empty()) << "the workers never heard of the round";
}

TEST_F(RegionRoundTest, ARankLostMidTransferAbortsNamingItAndEveryWorkerResumes) {
  const std::uint64_t round = beginBoth();
  ackAll(round);
  machine().agentGone(agent("t1-conn"), "it stopped heart-beating");
  const auto* abort = abortTo("w0-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::AgentDied);
  EXPECT_NE(text(abort->detail()).find("trainer rank 1 ('trainer-1'): it stopped heart-beating"), std::string::npos)
      << text(abort->detail());
  ASSERT_NE(wire_.last<msg::Resume>("w1-conn"), nullptr);
  EXPECT_EQ(shmLog_.aborted, (std::vector<test::FakeChannelOwnerLog::Aborted>{{round, true}}));
}

TEST_F(RegionRoundTest, AnyRanksCancelAbortsTheRound) {
  const std::uint64_t round = beginBoth();
  machine().trainerAbort(agent("t1-conn"), trainerCancel(round, "its optimizer step failed"));
  const auto* abort = abortTo("trainer-conn");
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->reason(), msg::AbortReason::Requested);
  EXPECT_NE(text(abort->detail()).find("trainer rank 1 ('trainer-1') cancelled: its optimizer step failed"),
            std::string::npos);
}

TEST_F(RegionRoundTest, ATrainerOfOneSourceWhileRanksGatherIsRefusedAndTheRanksGoOn) {
  addAgent("t2-conn", "other", msg::Role::Trainer, 2);
  beginRank(0, rankFields(0));
  machine().begin(agent("t2-conn"), 9, beginUpdate(BeginFields{.version = 2}));
  const auto* refusal = wire_.last<msg::Error>("t2-conn");
  ASSERT_NE(refusal, nullptr);
  EXPECT_EQ(refusal->code(), msg::ErrorCode::RoundInProgress);
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Begin);
  beginRank(1, rankFields(1));
  EXPECT_EQ(machine().phase(), msg::RoundPhase::Pause);
}

}  // namespace
}  // namespace wsync::coordinator
