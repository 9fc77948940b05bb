// libwsync.so's rounds, through wsync.h only: a coordinator, a trainer and workers in this process over shm. A
// committed version lands byte for byte with its outcome's fields; a pause callback that refuses aborts the round
// while the worker keeps its version; a version not above the committed one is refused by name; a version in
// flight makes another publish Busy; wsync_worker_wait_for_version; smaller structs of older callers; and the C
// example (examples/embed_c.c, C11 with every warning an error) runs a round.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

#include "capi_fixture.hpp"
#include "text_file.hpp"
#include "wsync/cli/child_process.hpp"

namespace wsync::capi_test {
namespace {

TEST_F(CApi, ACommittedVersionLandsInEveryWorkerWithItsOutcome) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  Engine engineA(model_), engineB(model_);
  Worker workerA = startWorker(bus_, "worker-a", engineA);
  Worker workerB = startWorker(bus_, "worker-b", engineB);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(workerA && workerB && trainer);
  EXPECT_NE(wsync_worker_rank(workerA.get()), wsync_worker_rank(workerB.get()));
  EXPECT_GE(wsync_trainer_rank(trainer.get()), 0);
  declare(trainer.get());

  const wsync_outcome outcome = publish(trainer.get(), model_, 1, sent_);
  EXPECT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED) << outcome.detail;
  EXPECT_EQ(outcome.version, 1U);
  EXPECT_EQ(outcome.round, 1U);
  EXPECT_EQ(outcome.bytes, model_.totalBytes());
  EXPECT_NE(outcome.digest_lo | outcome.digest_hi, 0U);
  EXPECT_EQ(outcome.abort_reason, 0);
  EXPECT_EQ(outcome.refusal, 0);
  EXPECT_GT(outcome.total_ns, 0);
  EXPECT_GE(outcome.total_ns, outcome.until_plan_ns + outcome.sending_ns);
  EXPECT_STREQ(outcome.detail, "");

  for (auto* worker : {workerA.get(), workerB.get()}) {
    ASSERT_EQ(wsync_worker_wait_for_version(worker, 1, kGenerousMs), WSYNC_OK) << lastError();
    EXPECT_EQ(wsync_worker_applied_version(worker), 1U);
    EXPECT_EQ(wsync_worker_committed_version(worker), 1U);
    wsync_worker_counters counters{};
    counters.struct_size = sizeof(counters);
    ASSERT_EQ(wsync_worker_counters_get(worker, &counters), WSYNC_OK) << lastError();
    EXPECT_EQ(counters.rounds_applied, 1U);
    EXPECT_EQ(counters.rounds_aborted + counters.rounds_refused + counters.transfers_failed, 0U);
  }
  for (Engine* engine : {&engineA, &engineB}) {
    EXPECT_EQ(engine->calls(3), (std::vector<std::string>{"pause 2 round 1", "applied 1 round 1", "resume at 1"}));
    EXPECT_TRUE(engine->holds(1));
  }
  EXPECT_EQ(wsync_trainer_committed_version(trainer.get()), 1U);
  EXPECT_EQ(wsync_coordinator_committed_version(coordinator_->get()), 1U);
  wsync_progress progress{};
  progress.struct_size = sizeof(progress);
  ASSERT_EQ(wsync_trainer_progress(trainer.get(), &progress), WSYNC_OK) << lastError();
  EXPECT_EQ(progress.version, 1U);
  EXPECT_EQ(progress.bytes_total, model_.totalBytes());
  EXPECT_EQ(progress.bytes_sent, model_.totalBytes());
  EXPECT_EQ(progress.sending, 0);

  // The next version, in another pause mode, replaces it everywhere.
  auto tensors = model_.tensors(sent_ = model_.content(2));
  wsync_publish_options options;
  wsync_publish_options_init(&options);
  options.label = "step-2";
  options.pause_mode = WSYNC_PAUSE_ABORT;
  ASSERT_EQ(wsync_trainer_publish(trainer.get(), 2, tensors.data(), tensors.size(), &options), WSYNC_OK) << lastError();
  wsync_outcome second = emptyOutcome();
  ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &second), WSYNC_OK) << lastError();
  EXPECT_EQ(second.kind, WSYNC_OUTCOME_COMMITTED) << second.detail;
  ASSERT_EQ(wsync_worker_wait_for_version(workerB.get(), 2, kGenerousMs), WSYNC_OK) << lastError();
  EXPECT_EQ(engineB.calls(6)[3], "pause 0 round 2");
  EXPECT_TRUE(engineB.holds(2));
}

TEST_F(CApi, APauseCallbackThatRefusesAbortsTheRoundAndTheWorkerKeepsItsVersion) {
  ASSERT_NO_FATAL_FAILURE(startBus());
  ASSERT_EQ(publish(trainer_.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  engine_.calls(3);

  engine_.failPauses(1);
  const wsync_outcome refused = publish(trainer_.get(), model_, 2, sent_);
  EXPECT_EQ(refused.kind, WSYNC_OUTCOME_ABORTED);
  EXPECT_STREQ(wsync_abort_reason_name(refused.abort_reason), "AgentRefused");
  EXPECT_TRUE(contains(refused.detail, "the engine's pause hook failed: the engine is wedged")) << refused.detail;
  EXPECT_EQ(wsync_worker_applied_version(worker_.get()), 1U);
  EXPECT_TRUE(engine_.holds(1));
  std::this_thread::sleep_for(100ms);  // the round's Resume must not reach an engine that never paused
  EXPECT_EQ(engine_.calls(4).size(), 4U);
  wsync_worker_counters counters{};
  counters.struct_size = sizeof(counters);
  ASSERT_EQ(wsync_worker_counters_get(worker_.get(), &counters), WSYNC_OK);
  EXPECT_EQ(counters.rounds_refused, 1U);

  const wsync_outcome next = publish(trainer_.get(), model_, 3, sent_);
  EXPECT_EQ(next.kind, WSYNC_OUTCOME_COMMITTED) << next.detail;
  ASSERT_EQ(wsync_worker_wait_for_version(worker_.get(), 3, kGenerousMs), WSYNC_OK);
  EXPECT_TRUE(engine_.holds(3));
}

// A pause still running when the round ends (here by the pause timeout) is withdrawn on another thread: the
// callback gives up, the worker neither resumes the engine nor counts a refusal, and the next round commits.
TEST_F(CApi, APauseStillRunningWhenTheRoundEndsIsWithdrawn) {
  coordinator_.emplace(bus_, 300);
  ASSERT_NE(coordinator_->get(), nullptr);
  wsync_worker_config config = workerConfig(bus_, "worker", engine_);
  config.withdraw = &Engine::withdraw;
  auto tensors = engine_.bindings();
  wsync_worker* raw = nullptr;
  ASSERT_EQ(wsync_worker_start(&config, tensors.data(), tensors.size(), &raw), WSYNC_OK) << lastError();
  worker_.reset(raw);
  trainer_ = startTrainer(bus_);
  ASSERT_NO_FATAL_FAILURE(declare(trainer_.get()));
  ASSERT_EQ(publish(trainer_.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  engine_.calls(3);

  engine_.holdPauses(true);
  const wsync_outcome timedOut = publish(trainer_.get(), model_, 2, sent_);
  EXPECT_EQ(timedOut.kind, WSYNC_OUTCOME_ABORTED);
  EXPECT_STREQ(wsync_abort_reason_name(timedOut.abort_reason), "Timeout") << timedOut.detail;
  const auto calls = engine_.calls(5);
  ASSERT_GE(calls.size(), 5U);
  EXPECT_EQ(calls[3], "withdraw round 2");
  EXPECT_EQ(calls[4], "pause 2 round 2 withdrawn");
  engine_.holdPauses(false);
  std::this_thread::sleep_for(100ms);  // no Resume reaches an engine that never paused
  EXPECT_EQ(engine_.calls(5).size(), 5U);
  wsync_worker_counters counters{};
  counters.struct_size = sizeof(counters);
  ASSERT_EQ(wsync_worker_counters_get(worker_.get(), &counters), WSYNC_OK);
  EXPECT_EQ(counters.rounds_refused, 0U);
  EXPECT_EQ(wsync_worker_applied_version(worker_.get()), 1U);
  EXPECT_TRUE(engine_.holds(1));

  const wsync_outcome next = publish(trainer_.get(), model_, 3, sent_);
  EXPECT_EQ(next.kind, WSYNC_OUTCOME_COMMITTED) << next.detail;
  ASSERT_EQ(wsync_worker_wait_for_version(worker_.get(), 3, kGenerousMs), WSYNC_OK);
  EXPECT_TRUE(engine_.holds(3));
}

TEST_F(CApi, AVersionNotAboveTheCommittedOneIsRefusedByName) {
  ASSERT_NO_FATAL_FAILURE(startBus());
  ASSERT_EQ(publish(trainer_.get(), model_, 5, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  const wsync_outcome again = publish(trainer_.get(), model_, 5, sent_);
  EXPECT_EQ(again.kind, WSYNC_OUTCOME_REFUSED);
  EXPECT_STREQ(wsync_refusal_name(again.refusal), "VersionNotIncreasing") << again.detail;
  // The trainer hears "committed" when the coordinator commits; the worker applies when its Commit arrives, a
  // moment later (the fresh-Debian check once read the version in between).
  EXPECT_EQ(wsync_worker_wait_for_version(worker_.get(), 5, kGenerousMs), WSYNC_OK) << lastError();
  EXPECT_EQ(wsync_worker_applied_version(worker_.get()), 5U);
}

// While the engine holds its pause, the version is in flight: another publish is Busy and a poll times out.
TEST_F(CApi, InFlightPublishesAreBusyAndWaitsTimeOut) {
  ASSERT_NO_FATAL_FAILURE(startBus());
  wsync_outcome outcome = emptyOutcome();
  EXPECT_EQ(wsync_trainer_wait(trainer_.get(), 0, &outcome), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "nothing is in flight")) << lastError();

  engine_.holdPauses(true);
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  ASSERT_EQ(wsync_trainer_publish(trainer_.get(), 1, tensors.data(), tensors.size(), nullptr), WSYNC_OK);
  EXPECT_EQ(wsync_trainer_publish(trainer_.get(), 2, tensors.data(), tensors.size(), nullptr), WSYNC_BUSY);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(wsync_trainer_wait(trainer_.get(), 0, &outcome), WSYNC_TIMEOUT);
  EXPECT_EQ(wsync_trainer_wait(trainer_.get(), 50, &outcome), WSYNC_TIMEOUT);
  EXPECT_EQ(wsync_worker_wait_for_version(worker_.get(), 1, 0), WSYNC_TIMEOUT);
  engine_.holdPauses(false);
  ASSERT_EQ(wsync_trainer_wait(trainer_.get(), kGenerousMs, &outcome), WSYNC_OK) << lastError();
  EXPECT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED) << outcome.detail;
  EXPECT_STREQ(wsync_last_error(), "");
  // Handed out once: nothing is in flight any more.
  EXPECT_EQ(wsync_trainer_wait(trainer_.get(), 0, &outcome), WSYNC_INVALID_ARGUMENT);
}

TEST_F(CApi, WaitForVersionReturnsOnceTheVersionIsApplied) {
  ASSERT_NO_FATAL_FAILURE(startBus());
  EXPECT_EQ(wsync_worker_wait_for_version(worker_.get(), 0, 0), WSYNC_OK);
  EXPECT_EQ(wsync_worker_wait_for_version(worker_.get(), 1, 20), WSYNC_TIMEOUT);
  EXPECT_TRUE(contains(lastError(), "version 1 not applied yet")) << lastError();
  EXPECT_EQ(wsync_worker_wait_for_version(worker_.get(), 1, -1), WSYNC_INVALID_ARGUMENT);

  auto waiter = std::async(std::launch::async, [&] {
    const wsync_status status = wsync_worker_wait_for_version(worker_.get(), 1, kGenerousMs);
    return std::pair{status, lastError()};  // the last error is the waiting thread's own
  });
  ASSERT_EQ(publish(trainer_.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  const auto [status, error] = waiter.get();
  EXPECT_EQ(status, WSYNC_OK) << error;
  EXPECT_TRUE(engine_.holds(1));

  // A wait in progress when the worker is destroyed returns WSYNC_STOPPED, and the destroy waits for it.
  std::promise<void> calling;
  auto stopped = std::async(std::launch::async, [&calling, raw = worker_.get()] {
    calling.set_value();
    return wsync_worker_wait_for_version(raw, 2, kGenerousMs);
  });
  calling.get_future().wait();
  std::this_thread::sleep_for(200ms);  // inside the wait by now
  worker_.reset();
  EXPECT_EQ(stopped.get(), WSYNC_STOPPED);
}

// WSYNC_PUBLISH_SAME_TENSORS publishes the last accepted publish's memory again, as it is now: the caller updated it
// in place (what Python's publish(version) does); a manifest declared again forgets it.
TEST_F(CApi, TheSameTensorsPublishedAgainCarryWhatTheirMemoryHoldsNow) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  Worker worker = startWorker(bus_, "worker", engine_);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  ASSERT_EQ(publish(trainer.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);

  wsync_publish_options options;
  wsync_publish_options_init(&options);
  options.flags = WSYNC_PUBLISH_SAME_TENSORS;
  for (std::uint64_t version = 2; version <= 3; ++version) {
    const auto next = model_.content(version);
    for (std::size_t tensor = 0; tensor < sent_.size(); ++tensor) {  // in place: the buffers published at version 1
      std::copy(next[tensor].begin(), next[tensor].end(), sent_[tensor].begin());
    }
    ASSERT_EQ(wsync_trainer_publish(trainer.get(), version, nullptr, 0, &options), WSYNC_OK) << lastError();
    wsync_outcome outcome = emptyOutcome();
    ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &outcome), WSYNC_OK) << lastError();
    EXPECT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED) << outcome.detail;
    EXPECT_EQ(outcome.bytes, model_.totalBytes());
    ASSERT_EQ(wsync_worker_wait_for_version(worker.get(), version, kGenerousMs), WSYNC_OK) << lastError();
    EXPECT_TRUE(engine_.holds(version)) << "version " << version;
  }

  // Other memory in between: the repeat after it carries that memory, not the first (each array given is named
  // anew for the agent and the channels, which keep a named array without reading it again).
  std::vector<std::vector<std::byte>> elsewhere;
  ASSERT_EQ(publish(trainer.get(), model_, 4, elsewhere).kind, WSYNC_OUTCOME_COMMITTED);
  const auto fifth = model_.content(5);
  for (std::size_t tensor = 0; tensor < elsewhere.size(); ++tensor) {
    std::copy(fifth[tensor].begin(), fifth[tensor].end(), elsewhere[tensor].begin());
  }
  ASSERT_EQ(wsync_trainer_publish(trainer.get(), 5, nullptr, 0, &options), WSYNC_OK) << lastError();
  wsync_outcome outcome = emptyOutcome();
  ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &outcome), WSYNC_OK) << lastError();
  EXPECT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED) << outcome.detail;
  ASSERT_EQ(wsync_worker_wait_for_version(worker.get(), 5, kGenerousMs), WSYNC_OK) << lastError();
  EXPECT_TRUE(engine_.holds(5));

  declare(trainer.get());
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 6, nullptr, 0, &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "none was accepted since the manifest was declared")) << lastError();
}

// A caller built against an older header passes smaller structs: the fields it lacks take their defaults when
// read and are left alone when written.
TEST_F(CApi, AStructSizeSmallerThanTodaysTakesDefaultsForWhatItLacks) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  Worker worker = startWorker(bus_, "worker", engine_);
  ASSERT_TRUE(worker);

  wsync_trainer_config config;
  wsync_trainer_config_init(&config);
  config.connection.bus = bus_.c_str();
  config.agent_id = "old-trainer";
  config.struct_size = offsetof(wsync_trainer_config, rank);  // no rank, channel, cuda_device
  config.rank = -7;
  config.channel = 200;
  config.cuda_device = -3;
  wsync_trainer* raw = nullptr;
  ASSERT_EQ(wsync_trainer_start(&config, &raw), WSYNC_OK) << lastError();
  Trainer trainer(raw);
  EXPECT_GE(wsync_trainer_rank(trainer.get()), 0);
  declare(trainer.get());

  wsync_publish_options options;
  wsync_publish_options_init(&options);
  options.struct_size = offsetof(wsync_publish_options, pause_mode);  // label only
  options.label = "old";
  options.pause_mode = 99;
  options.flags = ~std::uint64_t{0};  // not read: ABI 1's struct ended before it
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  ASSERT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_OK) << lastError();

  wsync_outcome outcome{};
  std::memset(&outcome, 'x', sizeof(outcome));
  outcome.struct_size = offsetof(wsync_outcome, detail);  // no detail
  ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &outcome), WSYNC_OK) << lastError();
  EXPECT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED);
  EXPECT_EQ(outcome.version, 1U);
  EXPECT_EQ(outcome.struct_size, offsetof(wsync_outcome, detail));
  EXPECT_EQ(outcome.detail[0], 'x');
  EXPECT_EQ(outcome.detail[WSYNC_DETAIL_CHARS - 1], 'x');
  EXPECT_EQ(engine_.calls(1)[0], "pause 2 round 1");  // the default pause mode, Keep

  ASSERT_EQ(wsync_worker_wait_for_version(worker.get(), 1, kGenerousMs), WSYNC_OK);
  wsync_worker_counters counters{};
  counters.struct_size = offsetof(wsync_worker_counters, rounds_aborted);
  counters.rounds_aborted = 77;
  ASSERT_EQ(wsync_worker_counters_get(worker.get(), &counters), WSYNC_OK) << lastError();
  EXPECT_EQ(counters.rounds_applied, 1U);
  EXPECT_EQ(counters.rounds_aborted, 77U);
  counters.struct_size = 2;
  EXPECT_EQ(wsync_worker_counters_get(worker.get(), &counters), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "counters->struct_size is 2")) << lastError();
}

// The header is C: the example, compiled as C11 with -Wall -Wextra -Werror -pedantic, runs a round of its own.
TEST(CApiFromC, TheCExampleRunsARound) {
  const std::string output = ::testing::TempDir() + "/capi-example-" + std::to_string(::getpid()) + ".txt";
  const int outputFd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(outputFd, 0);
  auto example = cli::ChildProcess::spawn(WSYNC_EXAMPLE_C, {test::uniqueBusName("capic")},
                                          {.stdoutFd = outputFd, .deathSignal = SIGKILL});
  ::close(outputFd);
  EXPECT_EQ(example.wait(std::chrono::milliseconds(kGenerousMs)), 0) << example.describeExit();
  EXPECT_EQ(test::readTextFile(output), "version 1: committed; the worker holds 1 2 3 4\n");
  std::remove(output.c_str());
}

}  // namespace
}  // namespace wsync::capi_test
