// Who may speak for a registered agent (docs/security.md, "Identity"): only the connection it registered on, or a
// hello that proves itself the holder with the secret of the holder's Welcome. A client that quotes what anyone can
// learn (the agent's id, its pid, the coordinator's host key, which every Welcome carries) takes nothing over; the
// refusal tells it nothing to quote. Written from the schema alone (RawClient), against the real programs.
#include <string>

#include <gtest/gtest.h>

#include "raw_client.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/core/host_identity.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::test {
namespace {

// A RawClient sends no heartbeats: the coordinator's timeout is long enough that its registrations stay live
// through the test, so that every refusal below is about a live holder.
const std::vector<std::string> kLongHeartbeat{"--heartbeat-timeout-ms", "120000"};

std::string errorDetail(const bus::Message& message) {
  const auto* error = message.as<msg::Error>();
  return error != nullptr && error->detail() != nullptr ? error->detail()->str() : std::string();
}

// The answer to a hello: a Welcome or an Error.
std::optional<bus::Message> helloAnswer(RawClient& client) {
  return client.receive(
      [](const bus::Message& message) {
        return message.as<msg::Welcome>() != nullptr || message.as<msg::Error>() != nullptr;
      },
      kPatience);
}

std::optional<std::uint32_t> pidInSlotOf(const bus::ControlBlockView& block, const std::string& agentId) {
  for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
    const auto snapshot = block.agentSlot(slot);
    if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active && snapshot->agentId == agentId) {
      return snapshot->pid;
    }
  }
  return std::nullopt;
}

// The reproduction: a hello for a live worker's id, with the worker's pid and the coordinator's host key. It was
// taken for "the same process registering again", replaced the worker at once and received its Pause.
TEST_F(RoundFixture, AQuotedPidAndHostKeyTakeOverNoLiveAgent) {
  startCoordinator(kLongHeartbeat);
  auto worker = startWorker("w0");
  waitForAgents(1);
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  const auto workerPid = static_cast<std::uint32_t>(worker.pid());
  for (int attempt = 0; attempt < 10; ++attempt) {
    RawClient thief(context_, endpoints->requests, "thief");
    thief.sendHello({.agentId = "w0", .pid = workerPid, .hostKey = bus::thisHost().key});
    const auto answer = helloAnswer(thief);
    ASSERT_TRUE(answer);
    ASSERT_NE(answer->as<msg::Error>(), nullptr) << "a quoted pid and host key took over 'w0'";
    EXPECT_EQ(answer->as<msg::Error>()->code(), msg::ErrorCode::DuplicateAgent);
    // Nothing in the refusal names the holder's process.
    EXPECT_EQ(errorDetail(*answer).find(std::to_string(workerPid)), std::string::npos) << errorDetail(*answer);
  }
  EXPECT_EQ(pidInSlotOf(*block_, "w0"), workerPid);
  // The worker was never replaced: the rounds go on with it.
  auto trainer = startTrainer("t0", {"--steps", "2"});
  for (int round = 0; round < 2; ++round) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 2));
}

// The holder's secret is the proof: without it, or with another one, a hello on a new connection is refused while
// the holder lives; with it, the new connection is the registration at once and the old one speaks for nobody.
TEST_F(RoundFixture, OnlyTheRegistrationsSecretReplacesALiveRegistration) {
  startCoordinator(kLongHeartbeat);
  const auto endpoints = bus::resolveEndpoints(bus_);
  ASSERT_TRUE(endpoints);
  RawClient holder(context_, endpoints->requests, "holder");
  ASSERT_TRUE(holder.registerAs({.agentId = "x", .role = msg::Role::Trainer}, kPatience));
  const std::vector<std::uint8_t> secret = holder.secret();
  ASSERT_EQ(secret.size(), 16U);

  std::vector<std::uint8_t> wrong = secret;
  wrong.back() ^= 0x80;
  const std::vector<std::uint8_t> cut(secret.begin(), secret.end() - 1);
  for (const auto& offered : {std::vector<std::uint8_t>{}, wrong, cut}) {
    RawClient other(context_, endpoints->requests, "other");
    other.sendHello({.agentId = "x", .role = msg::Role::Trainer, .secret = offered});
    const auto answer = helloAnswer(other);
    ASSERT_TRUE(answer);
    ASSERT_NE(answer->as<msg::Error>(), nullptr) << "a hello with " << offered.size() << " bytes of secret took 'x'";
    EXPECT_EQ(answer->as<msg::Error>()->code(), msg::ErrorCode::DuplicateAgent);
  }

  RawClient again(context_, endpoints->requests, "again");
  again.sendHello({.agentId = "x", .role = msg::Role::Trainer, .secret = secret});
  const auto welcome = helloAnswer(again);
  ASSERT_TRUE(welcome);
  ASSERT_NE(welcome->as<msg::Welcome>(), nullptr) << errorDetail(*welcome);
  // A new registration, a new secret.
  const auto* renewed = welcome->as<msg::Welcome>()->registration_secret();
  ASSERT_NE(renewed, nullptr);
  EXPECT_NE(std::vector<std::uint8_t>(renewed->begin(), renewed->end()), secret);

  // The old connection's registration is gone: what it sends now is refused as from an unknown agent.
  bus::MessageBuilder builder;
  const std::uint64_t seq = holder.send(builder, msg::CreateHeartbeat(builder.fbb(), 0), holder.epoch());
  const auto refused = holder.receive(
      [seq](const bus::Message& message) {
        return message.as<msg::Error>() != nullptr && message.as<msg::Error>()->in_reply_to() == seq;
      },
      kPatience);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->as<msg::Error>()->code(), msg::ErrorCode::UnknownAgent);
}

// A real agent whose link breaks registers again on a new connection with its secret, and is back at once: it does
// not wait for its old registration to expire (here a two-minute heartbeat timeout), which a stranger must.
TEST_F(RoundFixture, AnAgentWhoseLinkBrokeIsBackAtOnceWithItsSecret) {
  startCoordinator(kLongHeartbeat, path("coordinator.log"));
  // The worker drops its control connection for 200 ms when version 1 pauses (a test fault), then registers again.
  auto worker = startWorker("w0", {"--fault", "disconnect@pause:1+200"});
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--steps", "0", "--interval-ms", "50"});
  // Within a few rounds the worker serves a version above the faulted one: it came back, long before its old
  // registration could have expired.
  EXPECT_TRUE(waitForAppliedAtLeast("w0", 2));
  trainer.signal(SIGTERM);
  (void)trainer.wait(kPatience);
  const std::string log = readTextFile(path("coordinator.log"));
  EXPECT_NE(log.find("replaced by a new registration: it registered again on a new connection (with its "
                     "registration's secret)"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace wsync::test
