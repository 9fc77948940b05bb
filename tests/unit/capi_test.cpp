// libwsync.so through its C API only (capi/include/wsync/wsync.h): a coordinator, a trainer and workers in this
// process over shm. A committed version lands byte for byte with its outcome's fields; every status path answers
// with its code and a text naming the problem; a pause callback that refuses aborts the round while the worker
// keeps its version; the event stream and the status are the JSON the programs print; a caller built against an
// older header (a smaller struct_size) gets defaults for what it lacks. capi_round.c runs a round from C.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <wsync/wsync.h>

#include "capi_round.h"
#include "test_environment.hpp"

namespace {

using namespace std::chrono_literals;

// Far above what any step takes here; only a broken agent or coordinator gets near it.
constexpr std::int64_t kGenerousMs = 20'000;

std::string lastError() { return wsync_last_error(); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A model of four tensors (a scalar among them) and the bytes of each version.
class Model {
 public:
  Model() {
    add("embed.weight", WSYNC_DTYPE_BF16, {256, 16});
    add("layers.0.weight", WSYNC_DTYPE_F32, {32, 32});
    add("head.bias", WSYNC_DTYPE_F8_E4M3, {16});
    add("scale", WSYNC_DTYPE_F64, {});
  }

  // Descriptions of the tensors over `buffers` (the trainer's content or a worker's destination).
  std::vector<wsync_tensor> tensors(std::vector<std::vector<std::byte>>& buffers) const {
    std::vector<wsync_tensor> out;
    for (std::size_t index = 0; index < names_.size(); ++index) {
      out.push_back(wsync_tensor{names_[index].c_str(), dtypes_[index], static_cast<uint32_t>(shapes_[index].size()),
                                 shapes_[index].empty() ? nullptr : shapes_[index].data(), buffers[index].data(),
                                 buffers[index].size()});
    }
    return out;
  }

  std::vector<std::vector<std::byte>> content(std::uint64_t version) const {
    std::vector<std::vector<std::byte>> buffers;
    for (std::size_t index = 0; index < names_.size(); ++index) {
      std::vector<std::byte> bytes(bytes_[index]);
      for (std::size_t at = 0; at < bytes.size(); ++at) {
        bytes[at] = static_cast<std::byte>(version == 0 ? 0 : (at * 31 + index * 7 + version * 13) & 0xFF);
      }
      buffers.push_back(std::move(bytes));
    }
    return buffers;
  }

  std::uint64_t totalBytes() const {
    std::uint64_t total = 0;
    for (const std::size_t bytes : bytes_) total += bytes;
    return total;
  }

 private:
  void add(std::string name, wsync_dtype dtype, std::vector<std::int64_t> shape) {
    std::size_t bytes = wsync_dtype_size(dtype);
    for (const std::int64_t dimension : shape) bytes *= static_cast<std::size_t>(dimension);
    names_.push_back(std::move(name));
    dtypes_.push_back(dtype);
    shapes_.push_back(std::move(shape));
    bytes_.push_back(bytes);
  }

  std::vector<std::string> names_;
  std::vector<wsync_dtype> dtypes_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<std::size_t> bytes_;
};

// A coordinator of the test's bus, small buckets so that the model takes several.
class Coordinator {
 public:
  explicit Coordinator(const std::string& bus) {
    wsync_coordinator_config config;
    wsync_coordinator_config_init(&config);
    config.bus = bus.c_str();
    config.bucket_bytes = 4096;  // the smallest: the model takes four buckets
    EXPECT_EQ(wsync_coordinator_start(&config, &coordinator_), WSYNC_OK) << lastError();
  }
  ~Coordinator() { wsync_coordinator_destroy(coordinator_); }
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  wsync_coordinator* get() const { return coordinator_; }

 private:
  wsync_coordinator* coordinator_ = nullptr;
};

// The engine behind a worker: its weights, and a log of what the callbacks were asked. A pause can be made to fail
// (the next N calls) or to block until released.
class Engine {
 public:
  explicit Engine(const Model& model) : model_(model), weights_(model.content(0)) {}

  static int32_t pause(void* userData, wsync_pause_mode mode, uint64_t round, char* error, size_t errorSize) {
    auto* engine = static_cast<Engine*>(userData);
    {
      std::unique_lock lock(engine->mutex_);
      engine->released_.wait(lock, [&] { return !engine->holdPauses_; });
    }
    const std::string call = "pause " + std::to_string(mode) + " round " + std::to_string(round);
    if (engine->pausesToFail_.load() > 0) {
      --engine->pausesToFail_;
      std::snprintf(error, errorSize, "the engine is wedged");
      engine->note(call + " failed");
      return 3;
    }
    engine->note(call);
    return 0;
  }
  static void resume(void* userData, uint64_t appliedVersion) {
    static_cast<Engine*>(userData)->note("resume at " + std::to_string(appliedVersion));
  }
  static void applied(void* userData, uint64_t version, uint64_t round) {
    static_cast<Engine*>(userData)->note("applied " + std::to_string(version) + " round " + std::to_string(round));
  }

  void failPauses(int count) { pausesToFail_ = count; }
  void holdPauses(bool hold) {
    {
      std::lock_guard lock(mutex_);
      holdPauses_ = hold;
    }
    released_.notify_all();
  }

  std::vector<std::string> calls(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(kGenerousMs), [&] { return log_.size() >= count; });
    return log_;
  }

  std::vector<wsync_tensor> bindings() { return model_.tensors(weights_); }
  bool holds(std::uint64_t version) const { return weights_ == model_.content(version); }

 private:
  void note(std::string line) {
    {
      std::lock_guard lock(mutex_);
      log_.push_back(std::move(line));
    }
    changed_.notify_all();
  }

  const Model& model_;
  std::vector<std::vector<std::byte>> weights_;
  std::atomic<int> pausesToFail_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable released_;
  bool holdPauses_ = false;
  std::vector<std::string> log_;
};

// `bus` and `id` must outlive the config.
wsync_worker_config workerConfig(const std::string& bus, const char* id, Engine& engine) {
  wsync_worker_config config;
  wsync_worker_config_init(&config);
  config.connection.bus = bus.c_str();
  config.agent_id = id;
  config.pause = &Engine::pause;
  config.resume = &Engine::resume;
  config.applied = &Engine::applied;
  config.user_data = &engine;
  return config;
}

struct WorkerDeleter {
  void operator()(wsync_worker* worker) const { wsync_worker_destroy(worker); }
};
struct TrainerDeleter {
  void operator()(wsync_trainer* trainer) const { wsync_trainer_destroy(trainer); }
};
struct EventsDeleter {
  void operator()(wsync_events* events) const { wsync_events_close(events); }
};
struct StringDeleter {
  void operator()(char* text) const { wsync_string_free(text); }
};
using Worker = std::unique_ptr<wsync_worker, WorkerDeleter>;
using Trainer = std::unique_ptr<wsync_trainer, TrainerDeleter>;
using Events = std::unique_ptr<wsync_events, EventsDeleter>;
using Text = std::unique_ptr<char, StringDeleter>;

Worker startWorker(const std::string& bus, const char* id, Engine& engine) {
  const wsync_worker_config config = workerConfig(bus, id, engine);
  auto tensors = engine.bindings();
  wsync_worker* worker = nullptr;
  EXPECT_EQ(wsync_worker_start(&config, tensors.data(), tensors.size(), &worker), WSYNC_OK) << lastError();
  return Worker(worker);
}

Trainer startTrainer(const std::string& bus, const char* id = "trainer") {
  wsync_trainer_config config;
  wsync_trainer_config_init(&config);
  config.connection.bus = bus.c_str();
  config.agent_id = id;
  wsync_trainer* trainer = nullptr;
  EXPECT_EQ(wsync_trainer_start(&config, &trainer), WSYNC_OK) << lastError();
  return Trainer(trainer);
}

wsync_outcome emptyOutcome() {
  wsync_outcome outcome{};
  outcome.struct_size = sizeof(outcome);
  return outcome;
}

// Publishes `version` of `model` and waits for its outcome.
wsync_outcome publish(wsync_trainer* trainer, const Model& model, std::uint64_t version,
                      std::vector<std::vector<std::byte>>& content) {
  content = model.content(version);
  auto tensors = model.tensors(content);
  EXPECT_EQ(wsync_trainer_publish(trainer, version, tensors.data(), tensors.size(), nullptr), WSYNC_OK) << lastError();
  wsync_outcome outcome = emptyOutcome();
  EXPECT_EQ(wsync_trainer_wait(trainer, kGenerousMs, &outcome), WSYNC_OK) << lastError();
  return outcome;
}

class CApi : public testing::Test {
 protected:
  void declare(wsync_trainer* trainer) {
    auto content = model_.content(0);
    auto tensors = model_.tensors(content);
    ASSERT_EQ(wsync_trainer_declare_manifest(trainer, tensors.data(), tensors.size()), WSYNC_OK) << lastError();
  }

  const std::string bus_ = wsync::test::uniqueBusName("capi");
  Model model_;
  std::vector<std::vector<std::byte>> sent_;
};

TEST_F(CApi, ACommittedVersionLandsInEveryWorkerWithItsOutcome) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
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
  EXPECT_EQ(wsync_coordinator_committed_version(coordinator.get()), 1U);
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
  ASSERT_EQ(wsync_trainer_publish(trainer.get(), 2, tensors.data(), tensors.size(), &options), WSYNC_OK)
      << lastError();
  wsync_outcome second = emptyOutcome();
  ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &second), WSYNC_OK) << lastError();
  EXPECT_EQ(second.kind, WSYNC_OUTCOME_COMMITTED) << second.detail;
  ASSERT_EQ(wsync_worker_wait_for_version(workerB.get(), 2, kGenerousMs), WSYNC_OK) << lastError();
  EXPECT_EQ(engineB.calls(6)[3], "pause 0 round 2");
  EXPECT_TRUE(engineB.holds(2));
}

TEST_F(CApi, APauseCallbackThatRefusesAbortsTheRoundAndTheWorkerKeepsItsVersion) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  Worker worker = startWorker(bus_, "worker", engine);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  ASSERT_EQ(publish(trainer.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  engine.calls(3);

  engine.failPauses(1);
  const wsync_outcome refused = publish(trainer.get(), model_, 2, sent_);
  EXPECT_EQ(refused.kind, WSYNC_OUTCOME_ABORTED);
  EXPECT_STREQ(wsync_abort_reason_name(refused.abort_reason), "AgentRefused");
  EXPECT_TRUE(contains(refused.detail, "the engine's pause hook failed: the engine is wedged")) << refused.detail;
  EXPECT_EQ(wsync_worker_applied_version(worker.get()), 1U);
  EXPECT_TRUE(engine.holds(1));
  std::this_thread::sleep_for(100ms);  // the round's Resume must not reach an engine that never paused
  EXPECT_EQ(engine.calls(4).size(), 4U);
  wsync_worker_counters counters{};
  counters.struct_size = sizeof(counters);
  ASSERT_EQ(wsync_worker_counters_get(worker.get(), &counters), WSYNC_OK);
  EXPECT_EQ(counters.rounds_refused, 1U);

  const wsync_outcome next = publish(trainer.get(), model_, 3, sent_);
  EXPECT_EQ(next.kind, WSYNC_OUTCOME_COMMITTED) << next.detail;
  ASSERT_EQ(wsync_worker_wait_for_version(worker.get(), 3, kGenerousMs), WSYNC_OK);
  EXPECT_TRUE(engine.holds(3));
}

TEST_F(CApi, AVersionNotAboveTheCommittedOneIsRefusedByName) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  Worker worker = startWorker(bus_, "worker", engine);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  ASSERT_EQ(publish(trainer.get(), model_, 5, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  const wsync_outcome again = publish(trainer.get(), model_, 5, sent_);
  EXPECT_EQ(again.kind, WSYNC_OUTCOME_REFUSED);
  EXPECT_STREQ(wsync_refusal_name(again.refusal), "VersionNotIncreasing") << again.detail;
  EXPECT_EQ(wsync_worker_applied_version(worker.get()), 5U);
}

// While the engine holds its pause, the version is in flight: another publish is Busy and a poll times out.
TEST_F(CApi, InFlightPublishesAreBusyAndWaitsTimeOut) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  Worker worker = startWorker(bus_, "worker", engine);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  wsync_outcome outcome = emptyOutcome();
  EXPECT_EQ(wsync_trainer_wait(trainer.get(), 0, &outcome), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "nothing is in flight")) << lastError();

  engine.holdPauses(true);
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  ASSERT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), nullptr), WSYNC_OK);
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 2, tensors.data(), tensors.size(), nullptr), WSYNC_BUSY);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(wsync_trainer_wait(trainer.get(), 0, &outcome), WSYNC_TIMEOUT);
  EXPECT_EQ(wsync_trainer_wait(trainer.get(), 50, &outcome), WSYNC_TIMEOUT);
  EXPECT_EQ(wsync_worker_wait_for_version(worker.get(), 1, 0), WSYNC_TIMEOUT);
  engine.holdPauses(false);
  ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &outcome), WSYNC_OK) << lastError();
  EXPECT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED) << outcome.detail;
  EXPECT_STREQ(wsync_last_error(), "");
  // Handed out once: nothing is in flight any more.
  EXPECT_EQ(wsync_trainer_wait(trainer.get(), 0, &outcome), WSYNC_INVALID_ARGUMENT);
}

TEST_F(CApi, WaitForVersionReturnsOnceTheVersionIsApplied) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  Worker worker = startWorker(bus_, "worker", engine);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  EXPECT_EQ(wsync_worker_wait_for_version(worker.get(), 0, 0), WSYNC_OK);
  EXPECT_EQ(wsync_worker_wait_for_version(worker.get(), 1, 20), WSYNC_TIMEOUT);
  EXPECT_TRUE(contains(lastError(), "version 1 not applied yet")) << lastError();
  EXPECT_EQ(wsync_worker_wait_for_version(worker.get(), 1, -1), WSYNC_INVALID_ARGUMENT);

  auto waiter = std::async(std::launch::async, [&] {
    const wsync_status status = wsync_worker_wait_for_version(worker.get(), 1, kGenerousMs);
    return std::pair{status, lastError()};  // the last error is the waiting thread's own
  });
  ASSERT_EQ(publish(trainer.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);
  const auto [status, error] = waiter.get();
  EXPECT_EQ(status, WSYNC_OK) << error;
  EXPECT_TRUE(engine.holds(1));
}

TEST_F(CApi, TheEventStreamShowsEveryPhaseOfARoundAsJson) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  wsync_connection connection{bus_.c_str(), nullptr, nullptr, nullptr};
  wsync_events* opened = nullptr;
  ASSERT_EQ(wsync_events_open(&connection, &opened), WSYNC_OK) << lastError();
  Events events(opened);
  // Live once the first event (the coordinator's beat) arrives.
  char* first = nullptr;
  ASSERT_EQ(wsync_events_next(events.get(), kGenerousMs, &first), WSYNC_OK) << lastError();
  Text(first).reset();

  Engine engine(model_);
  Worker worker = startWorker(bus_, "worker", engine);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  ASSERT_EQ(publish(trainer.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);

  std::set<std::string> topics;
  nlohmann::json commit;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGenerousMs);
  while (!topics.contains("round/idle") && std::chrono::steady_clock::now() < deadline) {
    char* raw = nullptr;
    const wsync_status status = wsync_events_next(events.get(), 100, &raw);
    if (status == WSYNC_TIMEOUT) continue;
    ASSERT_EQ(status, WSYNC_OK) << lastError();
    const Text text(raw);
    const nlohmann::json event = nlohmann::json::parse(text.get());
    for (const char* key : {"topic", "seq", "epoch", "sent_at_ns", "type"}) ASSERT_TRUE(event.contains(key)) << key;
    topics.insert(event["topic"].get<std::string>());
    if (event["topic"] == "round/commit") commit = event;
  }
  for (const char* topic : {"agent/joined", "round/begin", "round/pause", "round/transfer", "round/commit",
                            "round/resume", "round/idle"}) {
    EXPECT_TRUE(topics.contains(topic)) << topic << " not seen; seen: " << nlohmann::json(topics).dump();
  }
  ASSERT_FALSE(commit.is_null());
  EXPECT_EQ(commit["version"], 1);
  EXPECT_EQ(commit["bytes"], model_.totalBytes());
  EXPECT_EQ(commit["type"], "Commit");

  char* none = reinterpret_cast<char*>(1);
  EXPECT_EQ(wsync_events_next(events.get(), -5, &none), WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
}

TEST_F(CApi, StatusIsTheCoordinatorsSnapshotAsJson) {
  wsync_connection connection{bus_.c_str(), nullptr, nullptr, nullptr};
  char* raw = nullptr;
  EXPECT_EQ(wsync_bus_status(&connection, 100, &raw), WSYNC_TIMEOUT);  // nobody runs the bus yet
  EXPECT_TRUE(contains(lastError(), "no coordinator answered")) << lastError();
  EXPECT_EQ(raw, nullptr);

  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  Worker worker = startWorker(bus_, "worker", engine);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  wsync_publish_options options;
  wsync_publish_options_init(&options);
  options.label = "first";
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  ASSERT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_OK);
  wsync_outcome outcome = emptyOutcome();
  ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &outcome), WSYNC_OK);

  ASSERT_EQ(wsync_bus_status(&connection, kGenerousMs, &raw), WSYNC_OK) << lastError();
  const Text text(raw);
  const nlohmann::json status = nlohmann::json::parse(text.get());
  EXPECT_EQ(status["bus"], bus_);
  EXPECT_EQ(status["committed_version"], 1);
  EXPECT_EQ(status["committed_label"], "first");
  EXPECT_EQ(status["phase"], "idle");
  std::set<std::pair<std::string, std::string>> agents;
  for (const auto& agent : status["agents"]) agents.emplace(agent["agent_id"], agent["role"]);
  EXPECT_EQ(agents, (std::set<std::pair<std::string, std::string>>{{"trainer", "trainer"}, {"worker", "worker"}}));
}

TEST_F(CApi, NullHandlesAndPointersAreRefusedByName) {
  wsync_outcome outcome = emptyOutcome();
  wsync_progress progress{};
  progress.struct_size = sizeof(progress);
  wsync_worker_counters counters{};
  counters.struct_size = sizeof(counters);
  char* json = nullptr;
  const std::pair<wsync_status, const char*> calls[] = {
      {wsync_coordinator_start(nullptr, nullptr), "out is NULL"},
      {wsync_trainer_start(nullptr, nullptr), "out is NULL"},
      {wsync_trainer_declare_manifest(nullptr, nullptr, 0), "trainer is NULL"},
      {wsync_trainer_publish(nullptr, 1, nullptr, 0, nullptr), "trainer is NULL"},
      {wsync_trainer_wait(nullptr, 0, &outcome), "trainer is NULL"},
      {wsync_trainer_progress(nullptr, &progress), "trainer is NULL"},
      {wsync_worker_start(nullptr, nullptr, 0, nullptr), "out is NULL"},
      {wsync_worker_wait_for_version(nullptr, 1, 0), "worker is NULL"},
      {wsync_worker_counters_get(nullptr, &counters), "worker is NULL"},
      {wsync_bus_status(nullptr, 0, &json), "connection is NULL"},
      {wsync_bus_status(nullptr, 0, nullptr), "json is NULL"},
      {wsync_events_open(nullptr, nullptr), "out is NULL"},
      {wsync_events_next(nullptr, 0, &json), "events is NULL"},
  };
  for (const auto& [status, text] : calls) {
    EXPECT_EQ(status, WSYNC_INVALID_ARGUMENT) << text;
  }
  // The last error is the last call's.
  EXPECT_STREQ(wsync_last_error(), "events is NULL");
  wsync_coordinator* coordinator = reinterpret_cast<wsync_coordinator*>(1);
  EXPECT_EQ(wsync_coordinator_start(nullptr, &coordinator), WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(coordinator, nullptr);
  EXPECT_STREQ(wsync_last_error(), "config is NULL");

  EXPECT_EQ(wsync_coordinator_committed_version(nullptr), 0U);
  EXPECT_EQ(wsync_trainer_committed_version(nullptr), 0U);
  EXPECT_EQ(wsync_trainer_rank(nullptr), -1);
  EXPECT_EQ(wsync_worker_applied_version(nullptr), 0U);
  EXPECT_EQ(wsync_worker_committed_version(nullptr), 0U);
  EXPECT_EQ(wsync_worker_rank(nullptr), -1);
  wsync_coordinator_destroy(nullptr);
  wsync_trainer_destroy(nullptr);
  wsync_worker_destroy(nullptr);
  wsync_events_close(nullptr);
  wsync_string_free(nullptr);
  wsync_coordinator_config_init(nullptr);
  wsync_trainer_config_init(nullptr);
  wsync_worker_config_init(nullptr);
  wsync_publish_options_init(nullptr);
}

TEST_F(CApi, ConfigsOutOfRangeAreRefusedByName) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  auto tensors = engine.bindings();
  wsync_worker* worker = nullptr;
  wsync_trainer* trainer = nullptr;

  wsync_coordinator_config coordinatorConfig;
  wsync_coordinator_config_init(&coordinatorConfig);
  coordinatorConfig.bus = bus_.c_str();
  wsync_coordinator* second = nullptr;
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_UNAVAILABLE);  // the bus has one
  EXPECT_TRUE(contains(lastError(), "pid")) << lastError();
  coordinatorConfig.heartbeat_timeout_ms = -1;
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "heartbeat_timeout_ms is -1")) << lastError();
  coordinatorConfig.struct_size = 0;
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "struct_size is 0")) << lastError();
  coordinatorConfig.struct_size = offsetof(wsync_coordinator_config, bus) + 3;  // inside a pointer
  EXPECT_EQ(wsync_coordinator_start(&coordinatorConfig, &second), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "ends inside a field")) << lastError();

  wsync_trainer_config trainerConfig;
  wsync_trainer_config_init(&trainerConfig);
  trainerConfig.connection.bus = bus_.c_str();
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "agent_id is required");
  trainerConfig.agent_id = "two words";
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "agent_id")) << lastError();
  trainerConfig.agent_id = "trainer";
  trainerConfig.channel = 9;
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "channel is 9: not a wsync_channel");
#ifndef WSYNC_HAVE_CUDA
  trainerConfig.channel = WSYNC_CHANNEL_NCCL;
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_UNSUPPORTED);
  EXPECT_TRUE(contains(lastError(), "without CUDA")) << lastError();
#endif
  trainerConfig.channel = WSYNC_CHANNEL_SHM;
  trainerConfig.connection.bus = "no/slashes";
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "bus 'no/slashes'")) << lastError();
  trainerConfig.connection.bus = bus_.c_str();
  trainerConfig.connection.curve_keys = "/nonexistent.keys";
  EXPECT_EQ(wsync_trainer_start(&trainerConfig, &trainer), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "CURVE needs both curve_keys and server_key")) << lastError();
  EXPECT_EQ(trainer, nullptr);

  wsync_worker_config workerConfigValue = workerConfig(bus_, "worker", engine);
  workerConfigValue.memory = 7;
  EXPECT_EQ(wsync_worker_start(&workerConfigValue, tensors.data(), tensors.size(), &worker), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "memory is 7")) << lastError();
  workerConfigValue = workerConfig(bus_, "worker", engine);
  workerConfigValue.resume = nullptr;
  EXPECT_EQ(wsync_worker_start(&workerConfigValue, tensors.data(), tensors.size(), &worker), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "callbacks are required")) << lastError();
  const std::string nobody = wsync::test::uniqueBusName("nobody");
  workerConfigValue = workerConfig(nobody, "worker", engine);
  workerConfigValue.registration_timeout_ms = 200;
  EXPECT_EQ(wsync_worker_start(&workerConfigValue, tensors.data(), tensors.size(), &worker), WSYNC_UNAVAILABLE);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(worker, nullptr);
}

TEST_F(CApi, MalformedTensorsAreRefusedNamingTheTensor) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  const wsync_worker_config config = workerConfig(bus_, "worker", engine);
  auto bindings = engine.bindings();
  auto refusedBinding = [&](std::vector<wsync_tensor> tensors) {
    wsync_worker* worker = nullptr;
    const wsync_status status = wsync_worker_start(&config, tensors.data(), tensors.size(), &worker);
    EXPECT_EQ(worker, nullptr);
    wsync_worker_destroy(worker);
    return std::pair{status, lastError()};
  };
  auto withTensor1 = [&](auto change) {
    auto tensors = bindings;
    change(tensors[1]);
    return refusedBinding(tensors);
  };
  using Answer = std::pair<wsync_status, std::string>;
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.bytes = 100; }),
            (Answer{WSYNC_INVALID_ARGUMENT,
                    "tensor 1 ('layers.0.weight'): bytes 100 but dtype F32 x shape [32, 32] is 4096"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.name = nullptr; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1: name is NULL"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.dtype = 99; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): dtype 99 is not a wsync dtype (1 to 15)"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.ndim = 17; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): ndim 17 is above 16"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.shape = nullptr; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): shape is NULL but ndim is 2"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.data = nullptr; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): data is NULL"}));
  const std::int64_t negative[] = {32, -32};
  EXPECT_EQ(withTensor1([&](wsync_tensor& t) { t.shape = negative; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 1 ('layers.0.weight'): shape [32, -32] is negative"}));
  EXPECT_EQ(withTensor1([](wsync_tensor& t) { t.name = "bad\tname"; }).first, WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "tensor 1: ")) << lastError();
  EXPECT_EQ(withTensor1([&](wsync_tensor& t) { t.name = bindings[0].name; }).first, WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "embed.weight")) << lastError();
  EXPECT_EQ(refusedBinding({}).second, "no tensors to bind: a worker binds at least one");
  wsync_worker* worker = nullptr;
  EXPECT_EQ(wsync_worker_start(&config, nullptr, 3, &worker), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "tensors is NULL but count is 3");

  // The trainer: its manifest, then versions that differ from it.
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(trainer);
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), nullptr), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "wsync_trainer_declare_manifest first")) << lastError();
  EXPECT_EQ(wsync_trainer_declare_manifest(trainer.get(), tensors.data(), 0), WSYNC_INVALID_ARGUMENT);
  auto badManifest = tensors;
  badManifest[2].dtype = 0;
  EXPECT_EQ(wsync_trainer_declare_manifest(trainer.get(), badManifest.data(), badManifest.size()),
            WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "tensor 2 ('head.bias'): dtype 0")) << lastError();
  declare(trainer.get());

  auto mismatch = [&](auto change) {
    auto changed = tensors;
    change(changed);
    const wsync_status status = wsync_trainer_publish(trainer.get(), 1, changed.data(), changed.size(), nullptr);
    return std::pair{status, lastError()};
  };
  EXPECT_EQ(mismatch([](auto& t) { std::swap(t[1], t[2]); }),
            (Answer{WSYNC_MANIFEST_MISMATCH, "tensor 1 ('head.bias'): the manifest has 'layers.0.weight' there"}));
  EXPECT_EQ(mismatch([](auto& t) { t.pop_back(); }),
            (Answer{WSYNC_MANIFEST_MISMATCH, "3 tensors for a manifest of 4"}));
  const std::int64_t transposed[] = {16, 256};
  EXPECT_EQ(mismatch([&](auto& t) { t[0].shape = transposed; }),
            (Answer{WSYNC_MANIFEST_MISMATCH,
                    "tensor 0 ('embed.weight'): dtype BF16 x shape [16, 256], the manifest says BF16 x [256, 16]"}));
  EXPECT_EQ(mismatch([](auto& t) { t[3].bytes = 4; }),
            (Answer{WSYNC_INVALID_ARGUMENT, "tensor 3 ('scale'): bytes 4 but dtype F64 x shape [] is 8"}));
  wsync_publish_options options;
  wsync_publish_options_init(&options);
  options.pause_mode = 3;
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_STREQ(wsync_last_error(), "options->pause_mode is 3: not a wsync_pause_mode");
  options.pause_mode = WSYNC_PAUSE_KEEP;
  options.label = "line\nbreak";
  EXPECT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "options->label")) << lastError();
  // Nothing of that was published.
  wsync_outcome outcome = emptyOutcome();
  EXPECT_EQ(wsync_trainer_wait(trainer.get(), 0, &outcome), WSYNC_INVALID_ARGUMENT);
}

// A caller built against an older header passes smaller structs: the fields it lacks take their defaults when
// read and are left alone when written.
TEST_F(CApi, AStructSizeSmallerThanTodaysTakesDefaultsForWhatItLacks) {
  Coordinator coordinator(bus_);
  ASSERT_NE(coordinator.get(), nullptr);
  Engine engine(model_);
  Worker worker = startWorker(bus_, "worker", engine);
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
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  ASSERT_EQ(wsync_trainer_publish(trainer.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_OK)
      << lastError();

  wsync_outcome outcome{};
  std::memset(&outcome, 'x', sizeof(outcome));
  outcome.struct_size = offsetof(wsync_outcome, detail);  // no detail
  ASSERT_EQ(wsync_trainer_wait(trainer.get(), kGenerousMs, &outcome), WSYNC_OK) << lastError();
  EXPECT_EQ(outcome.kind, WSYNC_OUTCOME_COMMITTED);
  EXPECT_EQ(outcome.version, 1U);
  EXPECT_EQ(outcome.struct_size, offsetof(wsync_outcome, detail));
  EXPECT_EQ(outcome.detail[0], 'x');
  EXPECT_EQ(outcome.detail[WSYNC_DETAIL_CHARS - 1], 'x');
  EXPECT_EQ(engine.calls(1)[0], "pause 2 round 1");  // the default pause mode, Keep

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

TEST(CApiNames, StatusesDtypesAndReasonsHaveTheirNames) {
  EXPECT_EQ(wsync_abi_version(), static_cast<uint32_t>(WSYNC_ABI_VERSION));
  EXPECT_STREQ(wsync_version(), "0.1.0");
  EXPECT_STREQ(wsync_status_name(WSYNC_OK), "ok");
  EXPECT_STREQ(wsync_status_name(WSYNC_MANIFEST_MISMATCH), "manifest_mismatch");
  EXPECT_STREQ(wsync_status_name(WSYNC_INTERNAL), "internal");
  EXPECT_STREQ(wsync_status_name(-1), "unknown");
  EXPECT_STREQ(wsync_status_name(9), "unknown");
  EXPECT_EQ(wsync_dtype_size(WSYNC_DTYPE_BF16), 2U);
  EXPECT_EQ(wsync_dtype_size(WSYNC_DTYPE_F8_E5M2), 1U);
  EXPECT_EQ(wsync_dtype_size(WSYNC_DTYPE_U64), 8U);
  EXPECT_EQ(wsync_dtype_size(0), 0U);
  EXPECT_EQ(wsync_dtype_size(16), 0U);
  EXPECT_STREQ(wsync_dtype_name(WSYNC_DTYPE_BF16), "BF16");
  EXPECT_STREQ(wsync_dtype_name(WSYNC_DTYPE_F8_E4M3), "F8E4M3");
  EXPECT_STREQ(wsync_dtype_name(0), "unknown");
  EXPECT_STREQ(wsync_dtype_name(255), "unknown");
  EXPECT_STREQ(wsync_abort_reason_name(0), "None");
  EXPECT_STREQ(wsync_abort_reason_name(3), "DigestMismatch");
  EXPECT_STREQ(wsync_abort_reason_name(999), "unknown");
  EXPECT_STREQ(wsync_refusal_name(7), "VersionNotIncreasing");
  EXPECT_STREQ(wsync_refusal_name(60000), "unknown");
  EXPECT_EQ(wsync_log_configure(nullptr, "loud", nullptr), WSYNC_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "level")) << lastError();
  EXPECT_EQ(wsync_log_configure("capi-test", "warn", "text"), WSYNC_OK) << lastError();
  EXPECT_STREQ(wsync_last_error(), "");
}

TEST(CApiFromC, ARoundRunsFromACTranslationUnit) {
  char error[512] = "";
  EXPECT_EQ(wsync_test_c_round(wsync::test::uniqueBusName("capic").c_str(), error, sizeof error), 0) << error;
}

}  // namespace
