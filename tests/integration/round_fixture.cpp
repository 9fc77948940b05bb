#include "round_fixture.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <utility>

#include "log_tails.hpp"
#include "test_environment.hpp"
#include "wsync/bus/protocol/topics.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::test {
namespace {

// The programs die with the test: a test that crashes must not leave a coordinator or an agent holding ctest's
// output pipe open, which turns a crash into a timeout of the whole test (PR_SET_PDEATHSIG). The fixture starts
// them from the test's own thread, which lives as long as the test does.
constexpr int kDeathSignal = SIGKILL;

}  // namespace

tl::expected<bus::EventSubscriber, std::string> subscribeLive(zmq::context_t& context, const std::string& endpoint,
                                                              std::vector<std::string> prefixes,
                                                              std::optional<bus::Received>& first,
                                                              const std::optional<bus::CurveClient>& curve) {
  prefixes.emplace_back(bus::topics::kBus);
  auto subscriber = bus::EventSubscriber::connect(context, endpoint, prefixes, curve);
  if (!subscriber) return tl::unexpected(subscriber.error().describe());
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    auto received = subscriber->receive(std::chrono::milliseconds(50));
    if (!received) return tl::unexpected(received.error().describe());
    if (*received) {
      first = std::move(**received);
      return std::move(*subscriber);
    }
  }
  return tl::unexpected("no event (not even the coordinator's beat) within " + std::to_string(kPatience.count()) +
                        " s of subscribing");
}

std::string testBinary(const std::string& builtPath) {
  const char* directory = std::getenv("WSYNC_TEST_BIN_DIR");
  if (directory == nullptr || *directory == '\0') return builtPath;
  return (std::filesystem::path(directory) / std::filesystem::path(builtPath).filename()).string();
}

void RoundFixture::SetUp() {
  bus_ = uniqueBusName("round");
  directory_ = ::testing::TempDir() + "/" + bus_;
  std::filesystem::create_directories(directory_);
}

void RoundFixture::TearDown() {
  // The programs' logs die with the test's folder: a failure (on CI above all) shows their last lines first.
  if (HasFailure()) printLogTails(directory_);
  events_.reset();
  block_.reset();
  if (coordinator_) {
    coordinator_->signal(SIGTERM);
    coordinator_->wait(std::chrono::seconds(10));
  }
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

void RoundFixture::startCoordinator(const std::vector<std::string>& extraArgs, const std::string& stderrPath) {
  std::vector<std::string> args{"--bus", bus_};
  // The fixture's settings, unless the test gives its own (the programs refuse an option given twice).
  const std::vector<std::pair<std::string, std::string>> defaults{
      {"--bucket-mib", "1"},
      {"--heartbeat-interval-ms", "100"},
      {"--heartbeat-timeout-ms", std::to_string(kTestHeartbeatTimeout.count())}};
  for (const auto& [flag, value] : defaults) {
    if (std::find(extraArgs.begin(), extraArgs.end(), flag) == extraArgs.end()) args.insert(args.end(), {flag, value});
  }
  args.insert(args.end(), extraArgs.begin(), extraArgs.end());
  coordinator_.reset();
  block_.reset();
  events_.reset();
  coordinator_.emplace(ChildProcess::spawn(testBinary(WSYNC_COORDINATOR_BIN), args,
                                           {.stderrFile = stderrPath, .deathSignal = kDeathSignal}));
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (true) {
    auto view = bus::ControlBlockView::open(bus_);
    if (view && view->coordinatorPid() == static_cast<std::uint32_t>(coordinator_->pid())) {
      block_.emplace(std::move(*view));
      break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the coordinator did not come up";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto endpoints = bus::resolveEndpoints(bus_, transport_);
  ASSERT_TRUE(endpoints);
  pending_.reset();
  auto subscriber = subscribeLive(context_, endpoints->events, {std::string(bus::topics::kRound)}, pending_, curve_);
  ASSERT_TRUE(subscriber) << subscriber.error();
  events_.emplace(std::move(*subscriber));
}

ChildProcess RoundFixture::startWorker(const std::string& id, const std::vector<std::string>& extraArgs,
                                       const std::string& stderrPath) {
  std::vector<std::string> args{"--bus", bus_, "--id", id, "--step-ms", "1", "-q"};
  if (std::find(extraArgs.begin(), extraArgs.end(), "--model") == extraArgs.end()) {
    args.insert(args.end(), {"--model", "tiny"});
  }
  args.insert(args.end(), extraArgs.begin(), extraArgs.end());
  return ChildProcess::spawn(testBinary(WSYNC_WORKER_BIN), args,
                             {.stderrFile = stderrPath, .deathSignal = kDeathSignal});
}

ChildProcess RoundFixture::startTrainer(const std::string& id, const std::vector<std::string>& extraArgs,
                                        const std::string& stderrPath) {
  std::vector<std::string> args{"--bus", bus_, "--id", id};
  if (std::find(extraArgs.begin(), extraArgs.end(), "--model") == extraArgs.end()) {
    args.insert(args.end(), {"--model", "tiny"});
  }
  args.insert(args.end(), extraArgs.begin(), extraArgs.end());
  return ChildProcess::spawn(testBinary(WSYNC_TRAINER_BIN), args,
                             {.stderrFile = stderrPath, .deathSignal = kDeathSignal});
}

void RoundFixture::waitForAgents(std::uint32_t count) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (block_->activeAgents() < count) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "only " << block_->activeAgents() << " of " << count << " agents registered";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

RoundOutcome RoundFixture::nextOutcome(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::optional<bus::Received> next = std::exchange(pending_, std::nullopt);
    if (!next) {
      auto received = events_->receive(std::chrono::milliseconds(50));
      if (received && *received) next = std::move(**received);
    }
    if (!next || !next->message) continue;
    const bus::Message& message = *next->message;
    if (const auto* transition = message.as<msg::RoundTransition>()) {
      if (transition->phase() == msg::RoundPhase::Transfer) transferRound_ = transition->round();
      continue;
    }
    RoundOutcome outcome;
    outcome.at = std::chrono::steady_clock::now();
    if (const auto* commit = message.as<msg::Commit>()) {
      outcome.round = commit->round();
      outcome.version = commit->version();
      outcome.committed = true;
    } else if (const auto* abort = message.as<msg::Abort>()) {
      outcome.round = abort->round();
      outcome.version = abort->version();
      outcome.reason = abort->reason();
      outcome.detail = abort->detail() ? abort->detail()->str() : std::string();
      outcome.agentId = abort->agent_id() ? abort->agent_id()->str() : std::string();
    } else {
      continue;
    }
    outcome.reachedTransfer = transferRound_ == outcome.round;
    return outcome;
  }
  ADD_FAILURE() << "no round outcome within " << timeout.count() << " s";
  return {};
}

std::optional<std::uint64_t> RoundFixture::appliedVersion(const std::string& agentId) {
  for (std::uint32_t slot = 0; slot < bus::kMaxAgents; ++slot) {
    const auto snapshot = block_->agentSlot(slot);
    if (snapshot && snapshot->occupancy == bus::SlotOccupancy::Active && snapshot->agentId == agentId &&
        snapshot->agentAttached) {
      return snapshot->appliedVersion;
    }
  }
  return std::nullopt;
}

bool RoundFixture::waitForApplied(const std::string& agentId, std::uint64_t version, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (appliedVersion(agentId) == version) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool RoundFixture::waitForRoundPhase(msg::RoundPhase phase) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (block_->roundState().phase != phase) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool RoundFixture::waitForAppliedAtLeast(const std::string& agentId, std::uint64_t version,
                                         std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (appliedVersion(agentId).value_or(0) >= version) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace wsync::test
