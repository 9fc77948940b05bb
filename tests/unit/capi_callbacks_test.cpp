// What a worker's own callbacks may not do, through wsync.h only: wsync_worker_destroy (which waits for the callback)
// and wsync_worker_wait_for_version (which waits for an apply that cannot happen while it runs), called from each of
// them (pause, resume, applied, withdraw), return WSYNC_INVALID_ARGUMENT with a text naming the call and the
// callback, where the destroy used to end the process (std::system_error "Resource deadlock avoided" through a
// destructor) or, from withdraw, to hang it. The worker goes on as it was: its rounds commit, and it is destroyed
// from another thread afterwards. Destroying another worker from a callback is no such call, and works.
#include <condition_variable>
#include <mutex>

#include "capi_fixture.hpp"

namespace wsync::capi_test {
namespace {

// An engine whose callbacks call the forbidden functions on their own worker (`self`, set once it started) and log
// what each answered: "pause: destroy invalid_argument: <text>", "pause: wait invalid_argument: <text>". Its pauses
// can be held until withdrawn.
class SelfCallingEngine {
 public:
  explicit SelfCallingEngine(const Model& model) : weights_(model.content(0)), model_(model) {}

  wsync_worker_config config(const std::string& bus, const char* id, bool withdrawable) {
    wsync_worker_config config;
    wsync_worker_config_init(&config);
    config.connection.bus = bus.c_str();
    config.agent_id = id;
    config.pause = &pause;
    config.resume = &resume;
    config.applied = &applied;
    if (withdrawable) config.withdraw = &withdraw;
    config.user_data = this;
    return config;
  }
  std::vector<wsync_tensor> bindings() { return model_.tensors(weights_); }
  bool holds(std::uint64_t version) const { return weights_ == model_.content(version); }

  void holdPausesUntilWithdrawn(bool hold) { holdPauses_ = hold; }

  // Waits until `count` lines were logged, then returns the log.
  std::vector<std::string> calls(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(kGenerousMs), [&] { return log_.size() >= count; });
    return log_;
  }

  std::atomic<wsync_worker*> self{nullptr};
  // Destroyed by the resume callback when set (another worker than self).
  std::atomic<wsync_worker*> destroyOnResume{nullptr};

 private:
  static int32_t pause(void* userData, wsync_pause_mode, uint64_t, char*, size_t) {
    auto* engine = static_cast<SelfCallingEngine*>(userData);
    engine->callForbidden("pause");
    std::unique_lock lock(engine->mutex_);
    engine->released_.wait(lock, [&] { return !engine->holdPauses_ || engine->withdrawn_; });
    return std::exchange(engine->withdrawn_, false) ? 1 : 0;
  }
  static void resume(void* userData, uint64_t) {
    auto* engine = static_cast<SelfCallingEngine*>(userData);
    engine->callForbidden("resume");
    if (wsync_worker* other = engine->destroyOnResume.exchange(nullptr)) {
      const wsync_status status = wsync_worker_destroy(other);
      engine->note(std::string("resume: destroyed another worker: ") + wsync_status_name(status));
    }
  }
  static void applied(void* userData, uint64_t, uint64_t) {
    static_cast<SelfCallingEngine*>(userData)->callForbidden("applied");
  }
  static void withdraw(void* userData, uint64_t) {
    auto* engine = static_cast<SelfCallingEngine*>(userData);
    engine->callForbidden("withdraw");
    {
      std::lock_guard lock(engine->mutex_);
      engine->withdrawn_ = true;
    }
    engine->released_.notify_all();
  }

  void callForbidden(const std::string& callback) {
    wsync_worker* worker = self.load();
    const wsync_status destroyed = wsync_worker_destroy(worker);
    note(callback + ": destroy " + wsync_status_name(destroyed) + ": " + wsync_last_error());
    const wsync_status waited = wsync_worker_wait_for_version(worker, 1000, kGenerousMs);
    note(callback + ": wait " + wsync_status_name(waited) + ": " + wsync_last_error());
  }
  void note(std::string line) {
    {
      std::lock_guard lock(mutex_);
      log_.push_back(std::move(line));
    }
    changed_.notify_all();
  }

  std::vector<std::vector<std::byte>> weights_;
  const Model& model_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable released_;
  std::atomic<bool> holdPauses_{false};
  bool withdrawn_ = false;  // guarded by mutex_
  std::vector<std::string> log_;
};

std::string refusal(const std::string& callback, const std::string& call, const std::string& text) {
  return callback + ": " + call + " invalid_argument: " + text;
}
std::string destroyRefused(const std::string& callback) {
  return refusal(callback, "destroy",
                 "wsync_worker_destroy from the worker's own " + callback +
                     " callback: the destroy waits for that callback to return; the worker goes on, destroy it "
                     "from another thread");
}
std::string waitRefused(const std::string& callback) {
  return refusal(callback, "wait",
                 "wsync_worker_wait_for_version from the worker's own " + callback +
                     " callback: no version is applied while one of its callbacks runs, so it would only wait out "
                     "its timeout; wait from another thread");
}

Worker startSelfCalling(const std::string& bus, const char* id, SelfCallingEngine& engine, bool withdrawable) {
  const wsync_worker_config config = engine.config(bus, id, withdrawable);
  auto tensors = engine.bindings();
  wsync_worker* worker = nullptr;
  EXPECT_EQ(wsync_worker_start(&config, tensors.data(), tensors.size(), &worker), WSYNC_OK) << lastError();
  engine.self = worker;
  return Worker(worker);
}

TEST_F(CApi, DestroyAndWaitFromAWorkersOwnCallbacksAreRefusedAndTheWorkerGoesOn) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  SelfCallingEngine engine(model_);
  Worker worker = startSelfCalling(bus_, "self-caller", engine, false);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());

  const std::vector<std::string> round = {destroyRefused("pause"), waitRefused("pause"),     destroyRefused("applied"),
                                          waitRefused("applied"),  destroyRefused("resume"), waitRefused("resume")};
  EXPECT_EQ(publish(trainer.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  EXPECT_EQ(engine.calls(6), round);
  // Refused before anything changed: the worker applied the version, and takes the next one.
  ASSERT_EQ(wsync_worker_wait_for_version(worker.get(), 1, kGenerousMs), WSYNC_OK) << lastError();
  EXPECT_TRUE(engine.holds(1));
  EXPECT_EQ(publish(trainer.get(), model_, 2, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  ASSERT_EQ(wsync_worker_wait_for_version(worker.get(), 2, kGenerousMs), WSYNC_OK) << lastError();
  EXPECT_TRUE(engine.holds(2));
  auto twoRounds = round;
  twoRounds.insert(twoRounds.end(), round.begin(), round.end());
  EXPECT_EQ(engine.calls(12), twoRounds);  // round 2's resume logged too: no callback runs after this
  wsync_worker_counters counters{};
  counters.struct_size = sizeof(counters);
  ASSERT_EQ(wsync_worker_counters_get(worker.get(), &counters), WSYNC_OK);
  EXPECT_EQ(counters.rounds_applied, 2U);

  // From the test's thread the destroy works, and leaves the last error as it was.
  EXPECT_EQ(wsync_worker_wait_for_version(nullptr, 1, 0), WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(wsync_worker_destroy(worker.release()), WSYNC_OK);
  EXPECT_STREQ(wsync_last_error(), "worker is NULL");
}

// The withdraw callback runs on the agent's pause watch thread, which the I/O thread joins once the pause callback
// returns: a destroy from there joined the I/O thread, which waited for it, for ever.
TEST_F(CApi, DestroyAndWaitFromAWorkersWithdrawCallbackAreRefusedAndTheWorkerGoesOn) {
  coordinator_.emplace(bus_, 300);  // the held pause times out, and is withdrawn
  ASSERT_NE(coordinator_->get(), nullptr);
  SelfCallingEngine engine(model_);
  Worker worker = startSelfCalling(bus_, "self-caller", engine, true);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());

  engine.holdPausesUntilWithdrawn(true);
  const wsync_outcome timedOut = publish(trainer.get(), model_, 1, sent_);
  EXPECT_EQ(timedOut.kind, WSYNC_OUTCOME_ABORTED);
  EXPECT_STREQ(wsync_abort_reason_name(timedOut.abort_reason), "Timeout") << timedOut.detail;
  const auto calls = engine.calls(4);
  ASSERT_GE(calls.size(), 4U);
  EXPECT_EQ(calls[2], destroyRefused("withdraw"));
  EXPECT_EQ(calls[3], waitRefused("withdraw"));

  engine.holdPausesUntilWithdrawn(false);
  EXPECT_EQ(publish(trainer.get(), model_, 2, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  ASSERT_EQ(wsync_worker_wait_for_version(worker.get(), 2, kGenerousMs), WSYNC_OK) << lastError();
  EXPECT_TRUE(engine.holds(2));
  EXPECT_EQ(wsync_worker_destroy(worker.release()), WSYNC_OK) << lastError();
}

TEST_F(CApi, AWorkersCallbackMayDestroyAnotherWorker) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  SelfCallingEngine engine(model_);
  Engine otherEngine(model_);
  Worker worker = startSelfCalling(bus_, "destroyer", engine, false);
  Worker other = startWorker(bus_, "destroyed", otherEngine);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && other && trainer);
  declare(trainer.get());
  struct DestroyIfLeft {  // should the resume never come, before otherEngine goes
    SelfCallingEngine& engine;
    ~DestroyIfLeft() { wsync_worker_destroy(engine.destroyOnResume.exchange(nullptr)); }
  } destroyIfLeft{engine};

  engine.destroyOnResume = other.release();
  EXPECT_EQ(publish(trainer.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  const auto calls = engine.calls(7);
  ASSERT_EQ(calls.size(), 7U);
  EXPECT_EQ(calls.back(), "resume: destroyed another worker: ok");
  // The round after it has one worker less, and commits.
  EXPECT_EQ(publish(trainer.get(), model_, 2, sent_).kind, WSYNC_OUTCOME_COMMITTED);
}

}  // namespace
}  // namespace wsync::capi_test
