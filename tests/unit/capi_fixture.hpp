#pragma once
// What the C API's tests share (capi_round_test.cpp, capi_boundary_test.cpp, capi_callbacks_test.cpp,
// capi_watch_test.cpp): a model and its versions' bytes, an engine behind a worker's callbacks, owning handles, and
// a fixture with a coordinator, a worker and a trainer on a bus of the test's own. Everything goes through wsync.h
// only.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <wsync/wsync.h>

#include "test_environment.hpp"

namespace wsync::capi_test {

using namespace std::chrono_literals;

// Far above what any step takes here; only a broken agent or coordinator gets near it.
inline constexpr std::int64_t kGenerousMs = 20'000;

inline std::string lastError() { return wsync_last_error(); }

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

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
  // `pauseTimeoutMs` 0: the default.
  explicit Coordinator(const std::string& bus, std::int64_t pauseTimeoutMs = 0) {
    wsync_coordinator_config config;
    wsync_coordinator_config_init(&config);
    config.bus = bus.c_str();
    config.bucket_bytes = 4096;  // the smallest: the model takes four buckets
    if (pauseTimeoutMs > 0) config.pause_timeout_ms = pauseTimeoutMs;
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
// (the next N calls) or to block until released, or until withdrawn (when the worker was given `withdraw`).
class Engine {
 public:
  explicit Engine(const Model& model) : model_(model), weights_(model.content(0)) {}

  static int32_t pause(void* userData, wsync_pause_mode mode, uint64_t round, char* error, size_t errorSize) {
    auto* engine = static_cast<Engine*>(userData);
    const std::string call = "pause " + std::to_string(mode) + " round " + std::to_string(round);
    {
      std::unique_lock lock(engine->mutex_);
      engine->released_.wait(lock, [&] { return !engine->holdPauses_ || engine->withdrawn_; });
      if (std::exchange(engine->withdrawn_, false)) {
        lock.unlock();
        std::snprintf(error, errorSize, "withdrawn while held");
        engine->note(call + " withdrawn");
        return 4;
      }
    }
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
  // Another thread's call, while `pause` runs: a held pause gives up.
  static void withdraw(void* userData, uint64_t round) {
    auto* engine = static_cast<Engine*>(userData);
    engine->note("withdraw round " + std::to_string(round));
    {
      std::lock_guard lock(engine->mutex_);
      engine->withdrawn_ = true;
    }
    engine->released_.notify_all();
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
  bool withdrawn_ = false;  // guarded by mutex_: the pause held now is withdrawn
  std::vector<std::string> log_;
};

// `bus` and `id` must outlive the config.
inline wsync_worker_config workerConfig(const std::string& bus, const char* id, Engine& engine) {
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

inline Worker startWorker(const std::string& bus, const char* id, Engine& engine) {
  const wsync_worker_config config = workerConfig(bus, id, engine);
  auto tensors = engine.bindings();
  wsync_worker* worker = nullptr;
  EXPECT_EQ(wsync_worker_start(&config, tensors.data(), tensors.size(), &worker), WSYNC_OK) << lastError();
  return Worker(worker);
}

inline Trainer startTrainer(const std::string& bus, const char* id = "trainer") {
  wsync_trainer_config config;
  wsync_trainer_config_init(&config);
  config.connection.bus = bus.c_str();
  config.agent_id = id;
  wsync_trainer* trainer = nullptr;
  EXPECT_EQ(wsync_trainer_start(&config, &trainer), WSYNC_OK) << lastError();
  return Trainer(trainer);
}

inline wsync_outcome emptyOutcome() {
  wsync_outcome outcome{};
  outcome.struct_size = sizeof(outcome);
  return outcome;
}

// Publishes `version` of `model` and waits for its outcome.
inline wsync_outcome publish(wsync_trainer* trainer, const Model& model, std::uint64_t version,
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

  void startCoordinator() {
    coordinator_.emplace(bus_);
    ASSERT_NE(coordinator_->get(), nullptr);
  }

  // The coordinator, one worker ("worker", bound to engine_) and a trainer ("trainer") with the model declared.
  void startBus() {
    ASSERT_NO_FATAL_FAILURE(startCoordinator());
    worker_ = startWorker(bus_, "worker", engine_);
    trainer_ = startTrainer(bus_);
    ASSERT_TRUE(worker_ && trainer_);
    ASSERT_NO_FATAL_FAILURE(declare(trainer_.get()));
  }

  // Destroyed in reverse: the agents, then the engine their callbacks reach, then the coordinator.
  const std::string bus_ = test::uniqueBusName("capi");
  Model model_;
  std::vector<std::vector<std::byte>> sent_;  // the trainer's content of the version in flight
  std::optional<Coordinator> coordinator_;
  Engine engine_{model_};
  Worker worker_;
  Trainer trainer_;
};

}  // namespace wsync::capi_test
