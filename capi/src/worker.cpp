// The worker agent behind wsync_worker_*: the caller's tensors bound by name, its callbacks as the agent's pause
// hooks (a pause callback that returns non-zero refuses the round), the applied version and its waiters.
#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "boundary.hpp"
#include "callback_scope.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/worker_agent/worker_agent.hpp"

struct wsync_worker {
  // Stops the agent, which wakes every wsync_worker_wait_for_version (they return WSYNC_STOPPED), and waits for them
  // to leave, so that the worker can go: a thread blocked in a wait while another destroys the worker is no crash.
  // Throws what stopping throws, leaving the worker to be stopped again.
  void stop() {
    agent->stop();
    std::unique_lock lock(waitersMutex);
    waitersLeft.wait(lock, [&] { return waiters == 0; });
  }

  // Null until the agent started: the handle exists first, so that its callbacks know which worker they belong to.
  std::unique_ptr<wsync::worker_agent::WorkerAgent> agent;
  std::mutex waitersMutex;  // guards waiters
  std::condition_variable waitersLeft;
  int waiters = 0;  // calls of wsync_worker_wait_for_version in progress
};

namespace wsync::capi {
namespace {

constexpr std::array kWorkerConfigFields{
    WSYNC_CAPI_FIELD(wsync_worker_config, connection),   WSYNC_CAPI_FIELD(wsync_worker_config, agent_id),
    WSYNC_CAPI_FIELD(wsync_worker_config, rank),         WSYNC_CAPI_FIELD(wsync_worker_config, memory),
    WSYNC_CAPI_FIELD(wsync_worker_config, cuda_device),  WSYNC_CAPI_FIELD(wsync_worker_config, registration_timeout_ms),
    WSYNC_CAPI_FIELD(wsync_worker_config, pause),        WSYNC_CAPI_FIELD(wsync_worker_config, resume),
    WSYNC_CAPI_FIELD(wsync_worker_config, applied),      WSYNC_CAPI_FIELD(wsync_worker_config, user_data),
    WSYNC_CAPI_FIELD(wsync_worker_config, withdraw),     WSYNC_CAPI_FIELD(wsync_worker_config, regions),
    WSYNC_CAPI_FIELD(wsync_worker_config, region_count),
};
// ABI 1's first layout ended at user_data (104 bytes): a caller built against it passes that struct_size, and its
// config has no withdraw callback.
static_assert(sizeof(wsync_worker_config) == 128 && offsetof(wsync_worker_config, user_data) == 96 &&
                  offsetof(wsync_worker_config, withdraw) == 104 && offsetof(wsync_worker_config, regions) == 112,
              "ABI 1's layout (regions appended: a caller built before them passes struct_size 112)");

constexpr std::array kCountersFields{
    WSYNC_CAPI_FIELD(wsync_worker_counters, rounds_applied),
    WSYNC_CAPI_FIELD(wsync_worker_counters, rounds_aborted),
    WSYNC_CAPI_FIELD(wsync_worker_counters, rounds_refused),
    WSYNC_CAPI_FIELD(wsync_worker_counters, transfers_failed),
};
static_assert(sizeof(wsync_worker_counters) == 40, "ABI 1's layout");

static_assert(WSYNC_MEMORY_HOST == static_cast<int>(worker_agent::BindingMemory::Host) &&
              WSYNC_MEMORY_DEVICE == static_cast<int>(worker_agent::BindingMemory::Device) &&
              WSYNC_MEMORY_HOST_IN_PLACE == static_cast<int>(worker_agent::BindingMemory::HostInPlace));

wsync_worker_config workerDefaults() {
  wsync_worker_config config{};
  config.struct_size = sizeof(config);
  config.rank = -1;
  config.memory = WSYNC_MEMORY_HOST;
  config.registration_timeout_ms = worker_agent::kRegistrationTimeout.count();
  return config;
}

// The caller's callbacks as the agent's hooks of `worker`. A callback is C and cannot throw; one written in C++
// that does anyway is caught here, on the I/O thread, rather than ending the process. Each runs in a CallbackScope,
// so that the calls it may not make on its own worker are refused.
worker_agent::PauseHooks hooksOf(const wsync_worker_config& config, const wsync_worker* worker) {
  worker_agent::PauseHooks hooks;
  hooks.pause = [pause = config.pause, userData = config.user_data, worker](
                    msg::PauseMode mode, std::uint64_t round) -> worker_agent::PauseResult {
    std::array<char, WSYNC_DETAIL_CHARS> error{};
    std::int32_t result = 0;
    const CallbackScope scope(worker, "pause");
    try {
      result = pause(userData, static_cast<wsync_pause_mode>(mode), round, error.data(), error.size());
    } catch (...) {
      return tl::unexpected(std::string("the pause callback threw an exception"));
    }
    if (result == 0) return {};
    error.back() = '\0';  // whatever the callback wrote, the text ends inside the buffer
    const std::string_view text(error.data(), strnlen(error.data(), error.size()));
    if (text.empty()) return tl::unexpected("the pause callback returned " + std::to_string(result));
    return tl::unexpected(bus::printableText(text));
  };
  hooks.resume = [resume = config.resume, userData = config.user_data, worker](std::uint64_t version) {
    const CallbackScope scope(worker, "resume");
    try {
      resume(userData, version);
    } catch (...) {
      log::error("the resume callback threw an exception (version {})", version);
    }
  };
  if (config.applied != nullptr) {
    hooks.applied = [applied = config.applied, userData = config.user_data, worker](std::uint64_t version,
                                                                                    std::uint64_t round) {
      const CallbackScope scope(worker, "applied");
      try {
        applied(userData, version, round);
      } catch (...) {
        log::error("the applied callback threw an exception (version {})", version);
      }
    };
  }
  if (config.withdraw != nullptr) {
    // On the agent's pause watch thread, while the pause callback runs on the I/O thread.
    hooks.withdraw = [withdraw = config.withdraw, userData = config.user_data, worker](std::uint64_t round) {
      const CallbackScope scope(worker, "withdraw");
      try {
        withdraw(userData, round);
      } catch (...) {
        log::error("the withdraw callback threw an exception (round {})", round);
      }
    };
  }
  return hooks;
}

tl::expected<worker_agent::WorkerOptions, std::pair<wsync_status, std::string>> optionsOf(
    const wsync_worker_config& config, std::span<const wsync_tensor> tensors) {
  auto invalid = [](std::string text) { return tl::unexpected(std::pair{WSYNC_INVALID_ARGUMENT, std::move(text)}); };
  auto identity = agentIdentityOf(config.connection, config.agent_id, config.rank);
  if (!identity) return invalid(std::move(identity.error()));
  if (config.pause == nullptr || config.resume == nullptr) {
    return invalid("the pause and resume callbacks are required");
  }
  if (config.memory > WSYNC_MEMORY_HOST_IN_PLACE) {
    return invalid("memory is " + std::to_string(config.memory) +
                   ": WSYNC_MEMORY_HOST, WSYNC_MEMORY_DEVICE or WSYNC_MEMORY_HOST_IN_PLACE");
  }
  if (config.memory == WSYNC_MEMORY_DEVICE && !builtWith(msg::ChannelKind::Nccl) &&
      !builtWith(msg::ChannelKind::CudaIpc)) {
    return tl::unexpected(std::pair{WSYNC_UNSUPPORTED, std::string("device bindings need the GPU channels, and this "
                                                                   "build of libwsync has none (built without CUDA)")});
  }
  if (config.cuda_device < 0) return invalid("cuda_device is " + std::to_string(config.cuda_device));
  if (config.registration_timeout_ms <= 0) {
    return invalid("registration_timeout_ms is " + std::to_string(config.registration_timeout_ms) +
                   ": give 1 ms or more");
  }
  if (tensors.empty()) return invalid("no tensors to bind: a worker binds at least one");
  worker_agent::WorkerOptions options;
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    auto spec = tensorSpecOf(tensors[index], index);
    if (!spec) return invalid(std::move(spec.error()));
    auto memory = tensorMemoryOf(tensors[index], *spec, index);
    if (!memory) return invalid(std::move(memory.error()));
    auto bound = options.bindings.bind(std::move(spec->name), spec->dtype, std::move(spec->shape), *memory);
    if (!bound) return invalid("tensor " + std::to_string(index) + ": " + bound.error().detail);
  }
  if (config.region_count > 0 && config.regions == nullptr) return invalid("regions is NULL and region_count is not 0");
  for (std::size_t index = 0; index < config.region_count; ++index) {
    const wsync_bound_region& region = config.regions[index];
    const std::string which = "region " + std::to_string(index);
    if (region.tensor == nullptr) return invalid(which + ": tensor is NULL");
    const std::string ranked = which + " of '" + region.tensor + "': ndim " + std::to_string(region.ndim);
    if (region.ndim > bus::kMaxTensorRank) return invalid(ranked + " is above " + std::to_string(bus::kMaxTensorRank));
    if (region.ndim > 0 && (region.offset == nullptr || region.extent == nullptr)) {
      return invalid(ranked + " but its offset or extent is NULL");
    }
    if (region.local >= tensors.size()) {
      return invalid(which + " of '" + region.tensor + "' goes into tensor " + std::to_string(region.local) + " of " +
                     std::to_string(tensors.size()));
    }
    const std::uint32_t localRank = tensors[region.local].ndim;
    if (localRank > 0 && (region.local_offset == nullptr || region.local_extent == nullptr)) {
      return invalid(which + " of '" + region.tensor + "': local_offset or local_extent is NULL");
    }
    bus::Box box{std::vector<std::int64_t>(region.offset, region.offset + region.ndim),
                 std::vector<std::int64_t>(region.extent, region.extent + region.ndim)};
    auto bound =
        options.bindings.bindRegion(region.tensor, std::move(box), options.bindings.tensors()[region.local].spec.name,
                                    std::vector<std::int64_t>(region.local_offset, region.local_offset + localRank),
                                    std::vector<std::int64_t>(region.local_extent, region.local_extent + localRank));
    if (!bound) return invalid(which + ": " + bound.error().detail);
  }
  std::move(*identity).moveInto(options);
  options.bindingMemory = static_cast<worker_agent::BindingMemory>(config.memory);
  options.cudaDevice = config.cuda_device;
  options.registrationTimeout = std::min(std::chrono::milliseconds(config.registration_timeout_ms), kLongestWait);
  return options;
}

wsync_status statusOf(worker_agent::WorkerError error) {
  switch (error) {
    case worker_agent::WorkerError::InvalidOptions:
    case worker_agent::WorkerError::InvalidBinding:
      return WSYNC_INVALID_ARGUMENT;
    case worker_agent::WorkerError::ManifestMismatch:
      return WSYNC_MANIFEST_MISMATCH;
    case worker_agent::WorkerError::Registration:
      return WSYNC_UNAVAILABLE;
  }
  return WSYNC_INTERNAL;
}

}  // namespace
}  // namespace wsync::capi

using namespace wsync;

extern "C" {

void wsync_worker_config_init(wsync_worker_config* config) {
  if (config != nullptr) *config = capi::workerDefaults();
}

wsync_status wsync_worker_start(const wsync_worker_config* config, const wsync_tensor* tensors, size_t count,
                                wsync_worker** out) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    auto read = capi::startConfig(out, config, capi::workerDefaults(), capi::kWorkerConfigFields);
    if (!read) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(read.error()));
    auto array = capi::tensorArrayOf(tensors, count);
    if (!array) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(array.error()));
    auto options = capi::optionsOf(*read, *array);
    if (!options) return capi::fail(options.error().first, std::move(options.error().second));
    auto worker = std::make_unique<wsync_worker>();
    auto agent = worker_agent::WorkerAgent::start(std::move(*options), capi::hooksOf(*read, worker.get()));
    if (!agent) return capi::fail(capi::statusOf(agent.error().code), agent.error().describe());
    worker->agent = std::move(*agent);
    *out = worker.release();
    return WSYNC_OK;
  });
}

uint64_t wsync_worker_applied_version(const wsync_worker* worker) {
  return worker == nullptr ? 0 : worker->agent->appliedVersion();
}

uint64_t wsync_worker_committed_version(const wsync_worker* worker) {
  return worker == nullptr ? 0 : worker->agent->committedVersion();
}

wsync_status wsync_worker_wait_for_version(wsync_worker* worker, uint64_t version, int64_t timeout_ms) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (worker == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "worker is NULL");
    if (const char* callback = capi::CallbackScope::runningFor(worker)) {
      return capi::fail(WSYNC_INVALID_ARGUMENT,
                        std::string("wsync_worker_wait_for_version from the worker's own ") + callback +
                            " callback: no version is applied while one of its callbacks runs, so it would only "
                            "wait out its timeout; wait from another thread");
    }
    auto timeout = capi::timeoutOf(timeout_ms, "timeout_ms");
    if (!timeout) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(timeout.error()));
    {
      std::lock_guard lock(worker->waitersMutex);
      ++worker->waiters;
    }
    struct Leave {
      wsync_worker& worker;
      ~Leave() {
        // Under the lock: once it is released, a destroy may free the worker.
        std::lock_guard lock(worker.waitersMutex);
        --worker.waiters;
        worker.waitersLeft.notify_all();
      }
    } leave{*worker};
    switch (worker->agent->waitForVersion(version, *timeout)) {
      case worker_agent::VersionWait::Reached:
        return WSYNC_OK;
      case worker_agent::VersionWait::Stopped:
        return capi::fail(WSYNC_STOPPED, "the worker agent stopped");
      case worker_agent::VersionWait::TimedOut:
        break;
    }
    return capi::fail(WSYNC_TIMEOUT, "version " + std::to_string(version) + " not applied yet (the worker holds " +
                                         std::to_string(worker->agent->appliedVersion()) + ")");
  });
}

int32_t wsync_worker_rank(const wsync_worker* worker) { return worker == nullptr ? -1 : worker->agent->rank(); }

wsync_status wsync_worker_counters_get(const wsync_worker* worker, wsync_worker_counters* counters) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (worker == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "worker is NULL");
    if (counters == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "counters is NULL");
    const worker_agent::WorkerCounters now = worker->agent->counters();
    wsync_worker_counters out{};
    out.struct_size = sizeof(out);
    out.rounds_applied = now.roundsApplied;
    out.rounds_aborted = now.roundsAborted;
    out.rounds_refused = now.roundsRefused;
    out.transfers_failed = now.transfersFailed;
    if (auto written = capi::writeVersioned(counters, out, capi::kCountersFields, "counters"); !written) {
      return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(written.error()));
    }
    return WSYNC_OK;
  });
}

wsync_status wsync_worker_destroy(wsync_worker* worker) {
  return capi::guardedCleanup(__func__, [&]() -> wsync_status {
    if (worker == nullptr) return WSYNC_OK;
    // The stop below joins the thread the callback runs on (or, for withdraw, one that joins it): from there it
    // would end the process or hang it. Refused before anything changes, so the worker goes on as it was.
    if (const char* callback = capi::CallbackScope::runningFor(worker)) {
      return capi::fail(WSYNC_INVALID_ARGUMENT,
                        std::string("wsync_worker_destroy from the worker's own ") + callback +
                            " callback: the destroy waits for that callback to return; the worker goes on, destroy "
                            "it from another thread");
    }
    // The I/O thread ends once a callback in progress returns, then goodbye (WorkerAgent::stop). Should stopping
    // throw, the worker is not freed: the caller may destroy it again.
    worker->stop();
    delete worker;
    return WSYNC_OK;
  });
}

}  // extern "C"
