// wsync-mon's view of a bus (tools/mon/bus_state.hpp): events move the round through its phases, snapshots fill in
// the agents and the payload's progress, and a snapshot older than the events already applied never turns a
// finished round back into a running one.
#include <gtest/gtest.h>

#include "bus_state.hpp"
#include "wsync/bus/protocol/topics.hpp"

namespace wsync::mon {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kEpoch = 0x5eed;

// Message::decode copies the bytes: the message outlives the builder.
bus::Message decoded(std::span<const std::uint8_t> bytes) {
  auto message = bus::Message::decode(bytes);
  EXPECT_TRUE(message.has_value());
  return std::move(*message);
}

bus::Message transition(std::uint64_t seq, std::uint64_t round, msg::RoundPhase phase, std::uint64_t totalBytes) {
  bus::MessageBuilder builder;
  auto& fbb = builder.fbb();
  const auto body = msg::CreateRoundTransition(fbb, round, round, phase, 2, fbb.CreateString(""), totalBytes);
  return decoded(builder.finish(body, bus::EnvelopeStamp{kEpoch, seq}));
}

bus::Message commit(std::uint64_t seq, std::uint64_t round, std::uint64_t bytes) {
  bus::MessageBuilder builder;
  auto& fbb = builder.fbb();
  const msg::Digest128 digest;
  const auto body = msg::CreateCommit(fbb, round, round, fbb.CreateString("step"), bytes, &digest);
  return decoded(builder.finish(body, bus::EnvelopeStamp{kEpoch, seq}));
}

struct AgentRow {
  const char* id;
  msg::Role role;
  msg::AgentState state;
  std::uint64_t transferRound;
  std::uint64_t transferBytes;
};

// A snapshot taken when the "round/" family had reached `roundSeq`, with the round `round` in `phase`.
bus::Message snapshot(std::uint64_t roundSeq, std::uint64_t round, msg::RoundPhase phase, std::uint64_t roundBytes,
                      const std::vector<AgentRow>& rows) {
  bus::MessageBuilder builder;
  auto& fbb = builder.fbb();
  std::vector<flatbuffers::Offset<msg::TopicSequence>> sequences{
      msg::CreateTopicSequence(fbb, fbb.CreateString(std::string(bus::topics::kRound)), roundSeq),
      msg::CreateTopicSequence(fbb, fbb.CreateString(std::string(bus::topics::kAgent)), 2)};
  std::vector<flatbuffers::Offset<msg::AgentInfo>> agents;
  std::uint32_t slot = 0;
  for (const AgentRow& row : rows) {
    agents.push_back(msg::CreateAgentInfo(fbb, fbb.CreateString(row.id), row.role, slot++, 0, round - 1, 10, row.state,
                                          row.transferRound, row.transferBytes));
  }
  const msg::Digest128 digest;
  const auto body = msg::CreateSnapshotReply(
      fbb, fbb.CreateVector(sequences), kEpoch, round - 1, fbb.CreateString("step"), phase, round, round,
      msg::PauseMode::Keep, phase != msg::RoundPhase::Idle, &digest, fbb.CreateVector(agents), roundBytes);
  return decoded(builder.finish(body, bus::EnvelopeStamp{kEpoch, 1}));
}

TEST(MonBusState, SnapshotsDuringATransferGiveBytesDoneAndRate) {
  BusState state;
  const auto start = Clock::now();
  state.applySnapshot(snapshot(10, 4, msg::RoundPhase::Pause, 1000, {}), start);
  ASSERT_EQ(state.apply("round/transfer", transition(11, 4, msg::RoundPhase::Transfer, 1000), start),
            BusState::Applied::Used);
  const std::vector<AgentRow> rows{{"t0", msg::Role::Trainer, msg::AgentState::Sending, 4, 600},
                                   {"w0", msg::Role::Worker, msg::AgentState::Receiving, 4, 550},
                                   {"w1", msg::Role::Worker, msg::AgentState::Receiving, 4, 500}};
  state.applySnapshot(snapshot(11, 4, msg::RoundPhase::Transfer, 1000, rows), start + std::chrono::seconds(2));
  ASSERT_TRUE(state.current().has_value());
  const CurrentRound& round = *state.current();
  EXPECT_EQ(round.phase, msg::RoundPhase::Transfer);
  EXPECT_EQ(round.totalBytes, 1000U);
  EXPECT_EQ(round.bytesSent, 600U);
  EXPECT_EQ(round.slowestReceived, 500U);
  EXPECT_DOUBLE_EQ(round.sendRate(), 300.0);  // 600 bytes in the 2 s since the transfer event
  EXPECT_EQ(state.agents().at("w1").state, msg::AgentState::Receiving);
}

TEST(MonBusState, ASnapshotOlderThanTheEventsDoesNotReopenARound) {
  BusState state;
  const auto now = Clock::now();
  state.applySnapshot(snapshot(10, 4, msg::RoundPhase::Transfer, 1000, {}), now);
  ASSERT_EQ(state.apply("round/verify", transition(11, 4, msg::RoundPhase::Verify, 1000), now),
            BusState::Applied::Used);
  ASSERT_EQ(state.apply("round/commit", commit(12, 4, 1000), now), BusState::Applied::Used);
  ASSERT_EQ(state.apply("round/idle", transition(13, 4, msg::RoundPhase::Idle, 1000), now), BusState::Applied::Used);
  ASSERT_FALSE(state.current().has_value());
  EXPECT_EQ(state.committedVersion(), 4U);

  // Asked for during the transfer, read after the commit: its round state is older than what the events said.
  const std::vector<AgentRow> rows{{"w0", msg::Role::Worker, msg::AgentState::Idle, 4, 1000}};
  state.applySnapshot(snapshot(11, 4, msg::RoundPhase::Transfer, 1000, rows), now);
  EXPECT_FALSE(state.current().has_value());
  EXPECT_EQ(state.committedVersion(), 4U);
  // The next events still follow on without a gap.
  EXPECT_EQ(state.apply("round/begin", transition(14, 5, msg::RoundPhase::Begin, 1000), now), BusState::Applied::Used);
  EXPECT_EQ(state.gaps(), 0U);
}

TEST(MonBusState, ASnapshotAheadOfTheEventsKeepsTheRoundsTimings) {
  BusState state;
  const auto now = Clock::now();
  // Taken while round 4 was already in transfer; its begin, pause and transfer events arrive after it.
  state.applySnapshot(snapshot(12, 4, msg::RoundPhase::Transfer, 1000, {}), now);
  EXPECT_EQ(state.apply("round/begin", transition(10, 4, msg::RoundPhase::Begin, 1000), now),
            BusState::Applied::AlreadyInSnapshot);
  EXPECT_EQ(state.apply("round/pause", transition(11, 4, msg::RoundPhase::Pause, 1000), now),
            BusState::Applied::AlreadyInSnapshot);
  EXPECT_EQ(state.apply("round/transfer", transition(12, 4, msg::RoundPhase::Transfer, 1000), now),
            BusState::Applied::AlreadyInSnapshot);
  ASSERT_EQ(state.apply("round/verify", transition(13, 4, msg::RoundPhase::Verify, 1000), now),
            BusState::Applied::Used);
  ASSERT_EQ(state.apply("round/commit", commit(14, 4, 1000), now), BusState::Applied::Used);
  ASSERT_EQ(state.recent().size(), 1U);
  EXPECT_GE(state.recent().front().totalSeconds, 0.0) << "the begin time came from the covered begin event";
  EXPECT_EQ(state.totals().roundSeconds.count(), 1U);
}

}  // namespace
}  // namespace wsync::mon
