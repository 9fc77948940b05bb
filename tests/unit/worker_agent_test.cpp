// WorkerAgent against a real coordinator in this process and a trainer made of a bare AgentSession: a committed
// version lands in the bound buffers byte for byte, around one pause and one resume; a manifest that disagrees
// with the bindings is refused before the engine is paused, naming the tensor; a corrupted receive is caught by
// the coordinator's digest comparison and never applied; a second worker of the process is refused the first
// one's memory until that one stops.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <wsync/coordinator/coordinator_thread.hpp>
#include "raw_client.hpp"
#include "test_environment.hpp"
#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/router_endpoint.hpp"
#include "wsync/cli/fault_injection.hpp"
#include "wsync/cli/model_catalog.hpp"
#include "wsync/coordinator/coordinator.hpp"
#include "wsync/worker_agent/worker_agent.hpp"

namespace wsync::worker_agent {
namespace {

using namespace std::chrono_literals;

// Far above what any step takes here; only a broken agent or coordinator gets near it.
constexpr auto kGenerous = 20s;
constexpr std::uint64_t kSeed = 11;

std::vector<bus::TensorSpec> tinyModel() { return *cli::modelTensors("tiny"); }

// The content of `version` of every tiny tensor (version 0: zeros, as the worker starts).
std::vector<std::vector<std::byte>> contentOf(std::uint64_t version) {
  const auto manifest = bus::Manifest::create(tinyModel());
  std::vector<std::vector<std::byte>> tensors(manifest->size());
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    tensors[index].assign(manifest->tensorBytes(index), std::byte{0});
    if (version == 0) continue;
    cli::fillTensor(tensors[index], kSeed, static_cast<std::uint32_t>(index));
    cli::perturbTensor(tensors[index], kSeed, static_cast<std::uint32_t>(index), version);
  }
  return tensors;
}

// The coordinator of the test's bus, stepped on its own thread.
coordinator::CoordinatorOptions coordinatorOptions(const std::string& bus) {
  coordinator::CoordinatorOptions options;
  options.bus = bus;
  options.bucketBytes = 4096;  // the tiny model's 4,322 bytes take two buckets
  return options;
}

struct RoundOutcome {
  bool committed = false;
  msg::AbortReason reason = msg::AbortReason::None;
  std::string detail;
};

// A trainer reduced to the protocol: BeginUpdate, send through the arena when the plan comes, UpdateDone, then
// wait for Commit or Abort.
class BareTrainer {
 public:
  explicit BareTrainer(const std::string& bus) : manifest_(*bus::Manifest::create(tinyModel())) {
    bus::SessionOptions options;
    options.bus = bus;
    options.agentId = "trainer";
    options.role = msg::Role::Trainer;
    auto opened = bus::AgentSession::open(context_, options);
    if (!opened) throw std::runtime_error(opened.error().describe());
    session_ = std::move(*opened);
    if (auto registered = session_->registerAgent(0); !registered) {
      throw std::runtime_error(registered.error().describe());
    }
  }

  RoundOutcome publish(std::uint64_t version, msg::PauseMode mode) {
    const auto content = contentOf(version);
    bus::MessageBuilder builder;
    auto& fbb = builder.fbb();
    const msg::Digest128 digest = bus::toMessage(manifest_.digest());
    const auto body = msg::CreateBeginUpdate(fbb, version, 0, &digest, manifest_.toMessage(fbb), msg::ChannelKind::Shm,
                                             mode, manifest_.totalBytes());
    EXPECT_TRUE(session_->send(builder, body).has_value());
    const auto deadline = std::chrono::steady_clock::now() + kGenerous;
    while (std::chrono::steady_clock::now() < deadline) {
      auto delivery = session_->next(20ms);
      if (!delivery || !delivery->message) continue;
      const bus::Message& message = *delivery->message;
      if (const auto* plan = message.as<msg::TransferPlan>()) {
        sendPayload(*plan, content);
      } else if (message.as<msg::Commit>() != nullptr) {
        return RoundOutcome{true, msg::AbortReason::None, {}};
      } else if (const auto* abort = message.as<msg::Abort>()) {
        return RoundOutcome{false, abort->reason(), abort->detail() ? abort->detail()->str() : std::string()};
      } else if (const auto* error = message.as<msg::Error>()) {
        ADD_FAILURE() << "the coordinator refused: " << (error->detail() ? error->detail()->str() : "");
        return {};
      }
    }
    ADD_FAILURE() << "no Commit or Abort for version " << version;
    return {};
  }

 private:
  void sendPayload(const msg::TransferPlan& plan, const std::vector<std::vector<std::byte>>& content) {
    auto arena = bus::ShmArena::open(plan.arena()->str());
    ASSERT_TRUE(arena.has_value()) << arena.error().describe();
    auto bucketPlan = bus::BucketPlan::build(manifest_, plan.bucket_bytes(), plan.alignment());
    ASSERT_TRUE(bucketPlan.has_value());
    std::vector<std::span<const std::byte>> spans(content.begin(), content.end());
    std::vector<std::uint32_t> receivers;
    for (std::uint32_t receiver = 0; receiver < plan.receiver_count(); ++receiver) receivers.push_back(receiver);
    auto sent = arena->send(plan.round(), *bucketPlan, spans, receivers, std::chrono::steady_clock::now() + kGenerous);
    bus::MessageBuilder builder;
    auto& fbb = builder.fbb();
    const msg::Digest128 digest = bus::toMessage(sent ? sent->digest : bus::Digest{});
    const auto body = msg::CreateUpdateDone(fbb, plan.round(), plan.version(), sent.has_value(), sent ? sent->bytes : 0,
                                            &digest, sent ? msg::AbortReason::None : msg::AbortReason::ChannelFailure);
    EXPECT_TRUE(session_->send(builder, body).has_value());
  }

  zmq::context_t context_{1};
  bus::Manifest manifest_;
  std::unique_ptr<bus::AgentSession> session_;
};

// The engine's side: real buffers bound by name, and a log of what the hooks were asked.
class FakeEngine {
 public:
  explicit FakeEngine(std::vector<bus::TensorSpec> specs = tinyModel()) : specs_(std::move(specs)) {
    for (const auto& spec : specs_) {
      std::uint64_t bytes = bus::elementBytes(spec.dtype);
      for (const auto dim : spec.shape) bytes *= static_cast<std::uint64_t>(dim);
      buffers_.emplace_back(bytes, std::byte{0});
    }
  }

  WorkerBindings bindings() {
    WorkerBindings bindings;
    for (std::size_t index = 0; index < specs_.size(); ++index) {
      auto bound = bindings.bind(specs_[index].name, specs_[index].dtype, specs_[index].shape, buffers_[index]);
      EXPECT_TRUE(bound.has_value()) << bound.error().describe();
    }
    return bindings;
  }

  PauseHooks hooks() {
    PauseHooks hooks;
    hooks.pause = [this](msg::PauseMode mode, std::uint64_t round) -> PauseResult {
      const std::string call = "pause " + std::string(msg::EnumNamePauseMode(mode)) + " round " + std::to_string(round);
      if (pausesToFail_.load() > 0) {
        --pausesToFail_;
        note(call + " failed");
        return tl::unexpected(std::string("the engine is wedged"));
      }
      note(call);
      return {};
    };
    hooks.resume = [this](std::uint64_t version) { note("resume at " + std::to_string(version)); };
    hooks.applied = [this](std::uint64_t version, std::uint64_t round) {
      note("applied " + std::to_string(version) + " round " + std::to_string(round));
    };
    return hooks;
  }

  // Waits until `count` hook calls were logged, then returns the log.
  std::vector<std::string> calls(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, kGenerous, [&] { return log_.size() >= count; });
    return log_;
  }

  // The next `count` pause hook calls fail ("the engine is wedged").
  void failPauses(int count) { pausesToFail_ = count; }

  bool holds(const std::vector<std::vector<std::byte>>& content) {
    std::lock_guard lock(mutex_);  // hooks finished before the log grew: the copy is complete
    return buffers_ == content;
  }

 private:
  void note(std::string line) {
    {
      std::lock_guard lock(mutex_);
      log_.push_back(std::move(line));
    }
    changed_.notify_all();
  }

  std::vector<bus::TensorSpec> specs_;
  std::vector<std::vector<std::byte>> buffers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> log_;
  std::atomic<int> pausesToFail_{0};
};

// A coordinator reduced to what a worker needs to register (a control block with its slot, a ROUTER that answers
// its hello), so that a test can send the worker what no coordinator sends.
class HandmadeCoordinator {
 public:
  explicit HandmadeCoordinator(const std::string& bus) {
    auto block = bus::ControlBlockOwner::create(bus);
    if (!block) throw std::runtime_error(block.error().describe());
    block_.emplace(std::move(*block));
    auto endpoints = bus::resolveEndpoints(bus);
    if (!endpoints) throw std::runtime_error(endpoints.error().describe());
    auto router = bus::RouterEndpoint::bind(context_, endpoints->requests);
    if (!router) throw std::runtime_error(router.error().describe());
    router_.emplace(std::move(*router));
  }

  // Answers the first hello with a Welcome to slot 0. Runs beside WorkerAgent::start(), which waits for it.
  bool welcomeOneWorker() {
    const auto deadline = std::chrono::steady_clock::now() + kGenerous;
    while (std::chrono::steady_clock::now() < deadline) {
      auto received = router_->receive(20ms);
      if (!received || !*received || !(*received)->message) continue;
      const auto* hello = (*received)->message->as<msg::AgentHello>();
      if (hello == nullptr) continue;
      worker_ = (*received)->source;
      const std::string agentId = hello->agent_id()->str();
      if (!block_->assignSlot(0, bus::SlotAssignment{agentId, msg::Role::Worker, 0, hello->pid()})) return false;
      bus::MessageBuilder builder;
      send(builder, msg::CreateWelcomeDirect(builder.fbb(), agentId.c_str(), 0, 0, 1, block_->epoch(), 0, 100, 2000,
                                             block_->segmentName().c_str()));
      return true;
    }
    return false;
  }

  template <typename Body>
  void send(bus::MessageBuilder& builder, flatbuffers::Offset<Body> body) {
    auto sent = router_->send(worker_, builder.finish(body, bus::EnvelopeStamp{block_->epoch(), ++seq_}));
    EXPECT_TRUE(sent.has_value()) << sent.error().describe();
    builder.reset();
  }

 private:
  zmq::context_t context_{1};
  std::optional<bus::ControlBlockOwner> block_;
  std::optional<bus::RouterEndpoint> router_;
  std::string worker_;
  std::uint64_t seq_ = 0;
};

// An operator's requests, as wsync-ctl sends them (pauses in mode Wait).
class Operator {
 public:
  explicit Operator(const std::string& bus) : client_(context_, bus::resolveEndpoints(bus)->requests, "ctl") {}

  // True once the coordinator answered.
  bool request(msg::ControlAction action) {
    bus::MessageBuilder builder;
    client_.send(builder, msg::CreateControlRequest(builder.fbb(), action, msg::PauseMode::Wait));
    return client_.receive<msg::ControlReply>(kGenerous).has_value();
  }

 private:
  zmq::context_t context_;
  test::RawClient client_;
};

WorkerOptions optionsFor(const std::string& bus, FakeEngine& engine) {
  WorkerOptions options;
  options.bus = bus;
  options.agentId = "worker-under-test";
  options.bindings = engine.bindings();
  return options;
}

TEST(WorkerAgent, AppliesACommittedVersionBetweenPauseAndResume) {
  const std::string bus = test::uniqueBusName("wapply");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  FakeEngine engine;
  auto agent = WorkerAgent::start(optionsFor(bus, engine), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  EXPECT_EQ((*agent)->rank(), 0);
  EXPECT_EQ((*agent)->appliedVersion(), 0U);
  BareTrainer trainer(bus);

  const RoundOutcome outcome = trainer.publish(1, msg::PauseMode::Keep);
  ASSERT_TRUE(outcome.committed) << msg::EnumNameAbortReason(outcome.reason) << ": " << outcome.detail;
  const auto calls = engine.calls(3);
  EXPECT_EQ(calls, (std::vector<std::string>{"pause Keep round 1", "applied 1 round 1", "resume at 1"}));
  EXPECT_EQ((*agent)->appliedVersion(), 1U);
  EXPECT_EQ((*agent)->committedVersion(), 1U);
  EXPECT_TRUE(engine.holds(contentOf(1)));

  ASSERT_TRUE(trainer.publish(2, msg::PauseMode::Abort).committed);
  EXPECT_EQ(engine.calls(6).back(), "resume at 2");
  EXPECT_TRUE(engine.holds(contentOf(2)));
  const WorkerCounters counters = (*agent)->counters();
  EXPECT_EQ(counters.roundsApplied, 2U);
  EXPECT_EQ(counters.roundsAborted + counters.roundsRefused + counters.transfersFailed, 0U);
  (*agent)->stop();
  (*agent)->stop();  // idempotent
}

// The pause word: an engine polling pauseRequested() sees a round's pause by the time its hook is called, with the
// round's mode, and sees it lifted once the round has resumed.
TEST(WorkerAgent, PauseRequestedShowsTheBusPauseWord) {
  const std::string bus = test::uniqueBusName("wpauseword");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  FakeEngine engine;
  std::atomic<WorkerAgent*> self{nullptr};
  std::mutex seenMutex;
  std::optional<bus::PauseState> seenInHook;
  PauseHooks hooks = engine.hooks();
  hooks.pause = [&, notePause = hooks.pause](msg::PauseMode mode, std::uint64_t round) {
    if (WorkerAgent* agent = self.load()) {
      std::lock_guard lock(seenMutex);
      seenInHook = agent->pauseRequested();
    }
    return notePause(mode, round);
  };
  auto agent = WorkerAgent::start(optionsFor(bus, engine), hooks);
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  self = agent->get();
  EXPECT_FALSE((*agent)->pauseRequested().paused);
  BareTrainer trainer(bus);
  ASSERT_TRUE(trainer.publish(1, msg::PauseMode::Wait).committed);
  EXPECT_EQ(engine.calls(3).back(), "resume at 1");
  {
    std::lock_guard lock(seenMutex);
    ASSERT_TRUE(seenInHook.has_value());
    EXPECT_TRUE(seenInHook->paused);
    EXPECT_EQ(seenInHook->mode, msg::PauseMode::Wait);
    EXPECT_EQ(seenInHook->round, 1U);
  }
  EXPECT_FALSE((*agent)->pauseRequested().paused);
  (*agent)->stop();
  self = nullptr;
}

TEST(WorkerAgent, RefusesAMismatchedManifestBeforePausing) {
  const std::string bus = test::uniqueBusName("wmismatch");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  auto specs = tinyModel();
  std::swap(specs[1].shape[0], specs[1].shape[1]);  // layers.0.attn.qkv.weight [48, 16] bound as [16, 48]
  FakeEngine engine(specs);
  auto agent = WorkerAgent::start(optionsFor(bus, engine), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  BareTrainer trainer(bus);

  const RoundOutcome outcome = trainer.publish(1, msg::PauseMode::Wait);
  EXPECT_FALSE(outcome.committed);
  EXPECT_EQ(outcome.reason, msg::AbortReason::ManifestMismatch);
  EXPECT_NE(outcome.detail.find("tensor 'layers.0.attn.qkv.weight': manifest shape [48, 16], bound [16, 48]"),
            std::string::npos)
      << outcome.detail;
  std::this_thread::sleep_for(100ms);  // the Resume that follows the Abort must not reach the engine either
  EXPECT_TRUE(engine.calls(0).empty()) << "the engine was paused for a round the worker refused";
  EXPECT_EQ((*agent)->appliedVersion(), 0U);
  EXPECT_EQ((*agent)->counters().roundsRefused, 1U);
}

TEST(WorkerAgent, NeverAppliesACorruptedReceive) {
  const std::string bus = test::uniqueBusName("wcorrupt");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  FakeEngine engine;
  WorkerOptions options = optionsFor(bus, engine);
  // The fault wsync-worker's --fault corrupt-receive@2 installs: a decorator of the payload channel, through the
  // agent's fault hook.
  auto spec = cli::parseFaultSpec("corrupt-receive@2");
  ASSERT_TRUE(spec.has_value()) << spec.error();
  options.faultHook = std::make_shared<cli::FaultInjector>(*spec);
  auto agent = WorkerAgent::start(std::move(options), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  BareTrainer trainer(bus);

  ASSERT_TRUE(trainer.publish(1, msg::PauseMode::Keep).committed);
  engine.calls(3);
  const RoundOutcome corrupted = trainer.publish(2, msg::PauseMode::Keep);
  EXPECT_FALSE(corrupted.committed);
  EXPECT_EQ(corrupted.reason, msg::AbortReason::DigestMismatch) << corrupted.detail;
  EXPECT_EQ(engine.calls(5).back(), "resume at 1");  // paused, not applied, resumed on the old version
  EXPECT_EQ((*agent)->appliedVersion(), 1U);
  EXPECT_TRUE(engine.holds(contentOf(1)));

  ASSERT_TRUE(trainer.publish(3, msg::PauseMode::Keep).committed);
  EXPECT_EQ(engine.calls(8).back(), "resume at 3");
  EXPECT_TRUE(engine.holds(contentOf(3)));
  EXPECT_EQ((*agent)->counters().roundsAborted, 1U);
}

// HostInPlace bindings take the round straight into the engine's buffers (no staging copy), so a receive that
// fails leaves them holding no committed version: the engine stays paused, not resumed on the old version, until a
// version commits into them.
TEST(WorkerAgent, AnInPlaceHostWorkerStaysPausedAfterATornReceiveUntilAVersionCommits) {
  const std::string bus = test::uniqueBusName("winplace");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  FakeEngine engine;
  WorkerOptions options = optionsFor(bus, engine);
  options.bindingMemory = BindingMemory::HostInPlace;
  auto spec = cli::parseFaultSpec("corrupt-receive@2");
  ASSERT_TRUE(spec.has_value()) << spec.error();
  options.faultHook = std::make_shared<cli::FaultInjector>(*spec);
  auto agent = WorkerAgent::start(std::move(options), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  BareTrainer trainer(bus);

  ASSERT_TRUE(trainer.publish(1, msg::PauseMode::Keep).committed);
  EXPECT_EQ(engine.calls(3), (std::vector<std::string>{"pause Keep round 1", "applied 1 round 1", "resume at 1"}));
  EXPECT_TRUE(engine.holds(contentOf(1)));

  const RoundOutcome corrupted = trainer.publish(2, msg::PauseMode::Keep);
  EXPECT_FALSE(corrupted.committed);
  EXPECT_EQ(corrupted.reason, msg::AbortReason::DigestMismatch) << corrupted.detail;
  EXPECT_EQ(engine.calls(4).back(), "pause Keep round 2");
  EXPECT_FALSE(engine.holds(contentOf(1))) << "the receive did not go into the bound buffers";
  EXPECT_EQ((*agent)->appliedVersion(), 1U);

  ASSERT_TRUE(trainer.publish(3, msg::PauseMode::Keep).committed);
  const auto calls = engine.calls(6);
  EXPECT_EQ(std::vector<std::string>(calls.begin() + 4, calls.end()),
            (std::vector<std::string>{"applied 3 round 3", "resume at 3"}))
      << "the engine was resumed between the torn receive and the next commit";
  EXPECT_TRUE(engine.holds(contentOf(3)));
}

// The operator's pause is its own message (OperatorPause, OperatorResume): a worker that registers while it holds is
// paused by it, rounds run and apply meanwhile, their Resumes leave the engine paused, and the operator's resume
// ends it.
TEST(WorkerAgent, AWorkerJoiningDuringAnOperatorsPauseIsPausedUntilTheOperatorResumes) {
  const std::string bus = test::uniqueBusName("wjoinpaused");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  Operator operatorClient(bus);
  ASSERT_TRUE(operatorClient.request(msg::ControlAction::Pause));

  FakeEngine engine;
  auto agent = WorkerAgent::start(optionsFor(bus, engine), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  EXPECT_EQ(engine.calls(1), (std::vector<std::string>{"pause Wait round 0"}));
  BareTrainer trainer(bus);
  ASSERT_TRUE(trainer.publish(1, msg::PauseMode::Keep).committed);
  // Round 2 begins after round 1 resumed: had that Resume reached the engine, it would be paused again for round 2.
  ASSERT_TRUE(trainer.publish(2, msg::PauseMode::Keep).committed);
  ASSERT_TRUE(operatorClient.request(msg::ControlAction::Resume));
  EXPECT_EQ(engine.calls(4),
            (std::vector<std::string>{"pause Wait round 0", "applied 1 round 1", "applied 2 round 2", "resume at 2"}));
  EXPECT_TRUE(engine.holds(contentOf(2)));
  (*agent)->stop();
}

// Rounds are numbered from 1: a Pause or Resume of round 0 (an operator's pause before protocol 2) is ignored.
// Each is followed by an OperatorPause, whose hook calls show what the worker made of it.
TEST(WorkerAgent, APauseOrResumeOfRound0IsIgnored) {
  const std::string bus = test::uniqueBusName("wround0");
  HandmadeCoordinator coordinator(bus);
  FakeEngine engine;
  auto welcomed = std::async(std::launch::async, [&] { return coordinator.welcomeOneWorker(); });
  auto agent = WorkerAgent::start(optionsFor(bus, engine), engine.hooks());
  ASSERT_TRUE(welcomed.get());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();

  bus::MessageBuilder builder;
  coordinator.send(builder, msg::CreatePause(builder.fbb(), 0, 0, msg::PauseMode::Abort));    // ignored
  coordinator.send(builder, msg::CreateOperatorPause(builder.fbb(), msg::PauseMode::Wait));   // pauses
  coordinator.send(builder, msg::CreateResume(builder.fbb(), 0, 0));                          // ignored
  coordinator.send(builder, msg::CreateOperatorPause(builder.fbb(), msg::PauseMode::Keep));   // held already
  coordinator.send(builder, msg::CreateOperatorResume(builder.fbb()));                        // resumes
  coordinator.send(builder, msg::CreateOperatorPause(builder.fbb(), msg::PauseMode::Abort));  // pauses
  EXPECT_EQ(engine.calls(3), (std::vector<std::string>{"pause Wait round 0", "resume at 0", "pause Abort round 0"}));
  (*agent)->stop();
}

// A pause hook that fails refuses the round: the coordinator aborts it (AgentRefused, with the hook's text), the
// engine is never resumed (it never paused) and keeps its version, and the next round commits.
TEST(WorkerAgent, APauseHookThatFailsRefusesTheRound) {
  const std::string bus = test::uniqueBusName("wpausefail");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  FakeEngine engine;
  auto agent = WorkerAgent::start(optionsFor(bus, engine), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  BareTrainer trainer(bus);
  ASSERT_TRUE(trainer.publish(1, msg::PauseMode::Keep).committed);
  engine.calls(3);

  engine.failPauses(1);
  const RoundOutcome refused = trainer.publish(2, msg::PauseMode::Wait);
  EXPECT_FALSE(refused.committed);
  EXPECT_EQ(refused.reason, msg::AbortReason::AgentRefused);
  EXPECT_NE(refused.detail.find("the engine's pause hook failed: the engine is wedged"), std::string::npos)
      << refused.detail;
  std::this_thread::sleep_for(100ms);  // the round's Resume must not reach an engine that never paused
  EXPECT_EQ(engine.calls(4).size(), 4U);
  EXPECT_EQ(engine.calls(4).back(), "pause Wait round 2 failed");
  EXPECT_EQ((*agent)->appliedVersion(), 1U);
  EXPECT_TRUE(engine.holds(contentOf(1)));
  EXPECT_EQ((*agent)->counters().roundsRefused, 1U);

  ASSERT_TRUE(trainer.publish(3, msg::PauseMode::Keep).committed);
  const auto calls = engine.calls(7);
  EXPECT_EQ(std::vector<std::string>(calls.begin() + 4, calls.end()),
            (std::vector<std::string>{"pause Keep round 3", "applied 3 round 3", "resume at 3"}));
  EXPECT_TRUE(engine.holds(contentOf(3)));
  (*agent)->stop();
}

// An operator's pause whose hook fails leaves the engine generating: its resume calls no hook, and a round that
// begins while it holds asks the engine to pause again.
TEST(WorkerAgent, AnOperatorsPauseThatFailsLeavesTheEngineUnpaused) {
  const std::string bus = test::uniqueBusName("wopfail");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  Operator operatorClient(bus);
  FakeEngine engine;
  auto agent = WorkerAgent::start(optionsFor(bus, engine), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();

  engine.failPauses(1);
  ASSERT_TRUE(operatorClient.request(msg::ControlAction::Pause));
  EXPECT_EQ(engine.calls(1), (std::vector<std::string>{"pause Wait round 0 failed"}));
  ASSERT_TRUE(operatorClient.request(msg::ControlAction::Resume));  // the engine never paused: nothing to resume

  engine.failPauses(1);
  ASSERT_TRUE(operatorClient.request(msg::ControlAction::Pause));
  EXPECT_EQ(engine.calls(2).back(), "pause Wait round 0 failed");
  BareTrainer trainer(bus);
  ASSERT_TRUE(trainer.publish(1, msg::PauseMode::Keep).committed);  // the round asks again, and it pauses
  ASSERT_TRUE(operatorClient.request(msg::ControlAction::Resume));
  EXPECT_EQ(engine.calls(5), (std::vector<std::string>{"pause Wait round 0 failed", "pause Wait round 0 failed",
                                                       "pause Wait round 0", "applied 1 round 1", "resume at 1"}));
  (*agent)->stop();
}

TEST(WorkerAgent, WaitForVersionWakesOnApplyAndOnStop) {
  const std::string bus = test::uniqueBusName("wwaitver");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  FakeEngine engine;
  auto agent = WorkerAgent::start(optionsFor(bus, engine), engine.hooks());
  ASSERT_TRUE(agent.has_value()) << agent.error().describe();
  WorkerAgent& worker = **agent;
  EXPECT_EQ(worker.waitForVersion(0, 0ms), VersionWait::Reached);
  EXPECT_EQ(worker.waitForVersion(1, 20ms), VersionWait::TimedOut);

  auto waiter = std::async(std::launch::async, [&] { return worker.waitForVersion(1, kGenerous); });
  BareTrainer trainer(bus);
  ASSERT_TRUE(trainer.publish(1, msg::PauseMode::Keep).committed);
  EXPECT_EQ(waiter.get(), VersionWait::Reached);
  EXPECT_EQ(worker.appliedVersion(), 1U);

  auto stopped = std::async(std::launch::async, [&] { return worker.waitForVersion(2, kGenerous); });
  std::this_thread::sleep_for(50ms);
  worker.stop();
  EXPECT_EQ(stopped.get(), VersionWait::Stopped);
  EXPECT_EQ(worker.waitForVersion(1, 0ms), VersionWait::Reached);
}

// Two workers of one process bound to the same memory would each write their versions into it, and the engine
// behind one serve what the other received while both report their versions applied. The second is refused before
// it registers, naming the tensor and the worker that holds it; once that worker stops its memory is free again,
// and a start that fails after claiming (no coordinator) holds nothing.
TEST(WorkerAgent, TwoWorkersOfOneProcessMayNotBindTheSameMemory) {
  const std::string bus = test::uniqueBusName("wshared");
  coordinator::CoordinatorThread coordinator(coordinatorOptions(bus));
  FakeEngine engine;
  FakeEngine other;
  WorkerOptions firstOptions = optionsFor(bus, engine);
  firstOptions.agentId = "worker-a";
  auto first = WorkerAgent::start(firstOptions, engine.hooks());
  ASSERT_TRUE(first.has_value()) << first.error().describe();

  WorkerOptions secondOptions = optionsFor(bus, engine);
  secondOptions.agentId = "worker-b";
  auto second = WorkerAgent::start(secondOptions, engine.hooks());
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, WorkerError::InvalidBinding);
  const std::string tensor = "tensor '" + tinyModel().front().name + "'";
  EXPECT_EQ(second.error().detail.find(tensor + ": memory "), 0U) << second.error().detail;
  EXPECT_NE(second.error().detail.find("overlaps that of " + tensor), std::string::npos) << second.error().detail;
  EXPECT_NE(second.error().detail.find("bound by worker 'worker-a' of this process"), std::string::npos)
      << second.error().detail;

  // Memory of its own is welcome beside the first, under the id the refused worker never registered.
  WorkerOptions besideOptions = optionsFor(bus, other);
  besideOptions.agentId = "worker-b";
  auto beside = WorkerAgent::start(besideOptions, other.hooks());
  ASSERT_TRUE(beside.has_value()) << beside.error().describe();
  (*beside)->stop();

  (*first)->stop();  // not destroyed yet, but nothing of it writes the memory any more
  auto after = WorkerAgent::start(secondOptions, engine.hooks());
  ASSERT_TRUE(after.has_value()) << after.error().describe();
  (*after)->stop();

  WorkerOptions lost = optionsFor(test::uniqueBusName("wnobody"), engine);
  lost.registrationTimeout = 200ms;
  auto nobody = WorkerAgent::start(lost, engine.hooks());
  ASSERT_FALSE(nobody.has_value());
  EXPECT_EQ(nobody.error().code, WorkerError::Registration) << nobody.error().describe();
  auto last = WorkerAgent::start(secondOptions, engine.hooks());
  EXPECT_TRUE(last.has_value()) << last.error().describe();
}

TEST(WorkerAgent, StartRefusesMissingHooksAndAbsentCoordinators) {
  FakeEngine engine;
  WorkerOptions options = optionsFor(test::uniqueBusName("wnobody"), engine);
  auto noHooks = WorkerAgent::start(options, PauseHooks{});
  ASSERT_FALSE(noHooks.has_value());
  EXPECT_EQ(noHooks.error().code, WorkerError::InvalidOptions);

  options.registrationTimeout = 200ms;
  auto nobody = WorkerAgent::start(options, engine.hooks());
  ASSERT_FALSE(nobody.has_value());
  EXPECT_EQ(nobody.error().code, WorkerError::Registration) << nobody.error().describe();
}

}  // namespace
}  // namespace wsync::worker_agent
