// A coordinator in the caller's process: coordinator::CoordinatorThread (the one tests and benchmarks use), plus a view
// of its control block for wsync_coordinator_committed_version, which any thread may call at any time.
#include <memory>

#include "boundary.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/coordinator/coordinator.hpp"
#include "wsync/coordinator/coordinator_thread.hpp"

struct wsync_coordinator {
  wsync::bus::ControlBlockView block;  // the committed version, as the coordinator stores it for every reader
  std::unique_ptr<wsync::coordinator::CoordinatorThread> thread;
};

namespace wsync::capi {
namespace {

constexpr std::array kCoordinatorConfigFields{
    WSYNC_CAPI_FIELD(wsync_coordinator_config, bus),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, transport),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, heartbeat_interval_ms),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, heartbeat_timeout_ms),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, pause_timeout_ms),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, transfer_timeout_ms),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, bucket_bytes),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, buffer_count),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, gpu_bucket_bytes),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, curve_keys),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, allowed_keys),
    WSYNC_CAPI_FIELD(wsync_coordinator_config, insecure),
};
static_assert(sizeof(wsync_coordinator_config) == 104 && offsetof(wsync_coordinator_config, insecure) == 96,
              "ABI 1's layout");

wsync_coordinator_config coordinatorDefaults() {
  const coordinator::CoordinatorOptions defaults;
  wsync_coordinator_config config{};
  config.struct_size = sizeof(config);
  config.heartbeat_interval_ms = defaults.heartbeatInterval.count();
  config.heartbeat_timeout_ms = defaults.heartbeatTimeout.count();
  config.pause_timeout_ms = defaults.pauseTimeout.count();
  config.transfer_timeout_ms = defaults.transferTimeout.count();
  config.bucket_bytes = defaults.bucketBytes;
  config.buffer_count = defaults.bufferCount;
  config.gpu_bucket_bytes = defaults.gpuBucketBytes;
  return config;
}

tl::expected<coordinator::CoordinatorOptions, std::string> optionsOf(const wsync_coordinator_config& config) {
  coordinator::CoordinatorOptions options;
  auto busName = requiredText(config.bus, "bus", kMaxConfigTextBytes);
  auto transport = optionalText(config.transport, "transport", kMaxConfigTextBytes);
  auto keys = optionalText(config.curve_keys, "curve_keys", kMaxConfigTextBytes);
  auto allowed = optionalText(config.allowed_keys, "allowed_keys", kMaxConfigTextBytes);
  if (!busName) return tl::unexpected(std::move(busName.error()));
  for (auto* text : {&transport, &keys, &allowed}) {
    if (!*text) return tl::unexpected(std::move(text->error()));
  }
  options.bus = std::move(*busName);
  if (*transport) options.transport = std::move(**transport);
  struct Duration {
    const char* name;
    std::int64_t milliseconds;
    std::chrono::milliseconds* into;
  };
  const Duration durations[] = {{"heartbeat_interval_ms", config.heartbeat_interval_ms, &options.heartbeatInterval},
                                {"heartbeat_timeout_ms", config.heartbeat_timeout_ms, &options.heartbeatTimeout},
                                {"pause_timeout_ms", config.pause_timeout_ms, &options.pauseTimeout},
                                {"transfer_timeout_ms", config.transfer_timeout_ms, &options.transferTimeout}};
  for (const Duration& duration : durations) {
    if (duration.milliseconds <= 0 || std::chrono::milliseconds(duration.milliseconds) > kLongestWait) {
      return tl::unexpected(std::string(duration.name) + " is " + std::to_string(duration.milliseconds) +
                            ": give 1 ms to a year");
    }
    *duration.into = std::chrono::milliseconds(duration.milliseconds);
  }
  if (config.bucket_bytes == 0 || config.buffer_count == 0 || config.gpu_bucket_bytes == 0) {
    return tl::unexpected(std::string("bucket_bytes, buffer_count and gpu_bucket_bytes must be above 0"));
  }
  options.bucketBytes = config.bucket_bytes;
  options.bufferCount = config.buffer_count;
  options.gpuBucketBytes = config.gpu_bucket_bytes;
  options.insecure = config.insecure != 0;
  if (!*keys && !*allowed) return options;
  if (!*keys || !*allowed) return tl::unexpected(std::string("CURVE needs both curve_keys and allowed_keys"));
  auto keyPair = bus::readCurveKeyPair(**keys);
  if (!keyPair) return tl::unexpected("curve_keys: " + keyPair.error());
  auto clients = bus::readCurveAllowlist(**allowed);
  if (!clients) return tl::unexpected("allowed_keys: " + clients.error());
  options.curveKeys = std::move(*keyPair);
  options.allowedClientKeys = std::move(*clients);
  return options;
}

wsync_status statusOf(coordinator::CoordinatorError error) {
  switch (error) {
    case coordinator::CoordinatorError::InvalidOptions:
      return WSYNC_INVALID_ARGUMENT;
    case coordinator::CoordinatorError::BusInUse:
    case coordinator::CoordinatorError::ControlBlock:
    case coordinator::CoordinatorError::Channel:
    case coordinator::CoordinatorError::Transport:
      return WSYNC_UNAVAILABLE;
  }
  return WSYNC_INTERNAL;
}

}  // namespace
}  // namespace wsync::capi

using namespace wsync;

extern "C" {

void wsync_coordinator_config_init(wsync_coordinator_config* config) {
  if (config != nullptr) *config = capi::coordinatorDefaults();
}

wsync_status wsync_coordinator_start(const wsync_coordinator_config* config, wsync_coordinator** out) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    auto read = capi::startConfig(out, config, capi::coordinatorDefaults(), capi::kCoordinatorConfigFields);
    if (!read) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(read.error()));
    auto options = capi::optionsOf(*read);
    if (!options) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(options.error()));
    auto started = coordinator::Coordinator::start(*options);
    if (!started) return capi::fail(capi::statusOf(started.error().code), started.error().describe());
    auto block = bus::ControlBlockView::open(options->bus);
    if (!block) return capi::fail(WSYNC_INTERNAL, "the new bus's control block: " + block.error().describe());
    *out =
        new wsync_coordinator{std::move(*block), std::make_unique<coordinator::CoordinatorThread>(std::move(*started))};
    return WSYNC_OK;
  });
}

uint64_t wsync_coordinator_committed_version(const wsync_coordinator* coordinator) {
  if (coordinator == nullptr) return 0;
  return coordinator->block.committedVersion();
}

void wsync_coordinator_destroy(wsync_coordinator* coordinator) {
  // The thread first (declared last): the coordinator ends a round in progress and says goodbye.
  capi::destroyHandle(__func__, coordinator);
}

}  // extern "C"
