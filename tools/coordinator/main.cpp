// wsync-coordinator: runs one bus until SIGINT or SIGTERM.
#include <malloc.h>

#include <atomic>
#include <csignal>

#include <CLI/CLI.hpp>

#include "wsync/bus/core/log.hpp"
#include "wsync/cli/fault_injection.hpp"
#include "wsync/cli/log_flags.hpp"
#include "wsync/coordinator/coordinator.hpp"

namespace {

std::atomic<bool> stopRequested{false};

void requestStop(int) { stopRequested.store(true, std::memory_order_release); }

// Allocations from this size up are mapped on their own and returned to the system when freed, so that the
// daemon's resident size falls again once ZeroMQ has let go of a client's message (glibc's default threshold adapts
// upwards to the largest block freed and would keep such blocks in the heap).
constexpr int kMmapThresholdBytes = 256 * 1024;

}  // namespace

int main(int argc, char** argv) {
  using namespace wsync::coordinator;
  CoordinatorOptions options;
  CLI::App app{"wsync-coordinator: registers agents and runs update rounds on one bus"};
  app.add_option("--bus", options.bus, "bus name ([A-Za-z0-9._-], up to 48 characters)")->required();
  app.add_option("--transport", options.transport, "ipc (this user, this host) or tcp://HOST:PORT")
      ->capture_default_str();
  std::uint64_t bucketMiB = options.bucketBytes >> 20;
  app.add_option("--bucket-mib", bucketMiB, "shm bucket size in MiB (memory: buffers x bucket)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  std::uint64_t gpuBucketMiB = options.gpuBucketBytes >> 20;
  app.add_option("--gpu-bucket-mib", gpuBucketMiB,
                 "nccl and cuda_ipc bucket size in MiB (nccl: 2 buckets of device memory on every rank)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16384));
  app.add_option("--buffers", options.bufferCount, "buffers the buckets rotate through (2 to 8)")
      ->capture_default_str()
      ->check(CLI::Range(2, 8));
  std::int64_t heartbeatIntervalMs = options.heartbeatInterval.count();
  std::int64_t heartbeatTimeoutMs = options.heartbeatTimeout.count();
  std::int64_t pauseTimeoutMs = options.pauseTimeout.count();
  std::int64_t transferTimeoutMs = options.transferTimeout.count();
  app.add_option("--heartbeat-interval-ms", heartbeatIntervalMs, "how often agents beat")->capture_default_str();
  app.add_option("--heartbeat-timeout-ms", heartbeatTimeoutMs, "silence after which an agent is dead")
      ->capture_default_str();
  app.add_option("--pause-timeout-ms", pauseTimeoutMs, "longest wait for every worker's pause ack")
      ->capture_default_str();
  app.add_option("--transfer-timeout-ms", transferTimeoutMs, "base allowance of a transfer (plus 1 s per GiB)")
      ->capture_default_str();
  std::int64_t sourcesTimeoutMs = options.sourcesTimeout.count();
  app.add_option("--sources-timeout-ms", sourcesTimeoutMs,
                 "longest wait, after a sharded trainer's first rank began a version, for its last rank")
      ->capture_default_str();
  std::int64_t linkTimeoutMs = options.link.timeout.count();
  app.add_option("--link-timeout-ms", linkTimeoutMs,
                 "silence after which a connection is dropped (ZMTP heartbeats; its agent registers again)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{3'600'000}));
  std::uint64_t receiveBudgetMiB = kDefaultReceiveMemoryBudget >> 20;
  app.add_option("--receive-budget-mib", receiveBudgetMiB,
                 "memory incoming messages may hold before the request endpoint is reset (clients reconnect); 0: off")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 20));
  std::string curveKeysPath;
  std::string allowKeysPath;
  app.add_option("--curve-keys", curveKeysPath, "tcp: the coordinator's CURVE key-pair file (wsync-keygen makes one)");
  app.add_option("--allow-keys", allowKeysPath, "tcp: the clients' public keys it admits, one per line");
  app.add_flag("--insecure", options.insecure, "tcp without CURVE: unauthenticated and unencrypted (trusted networks)");
  std::string fault;
  app.add_option("--fault", fault, "TEST ONLY: ACTION@POINT:VERSION[+MS] (docs/faults.md)")->group("Testing");
  wsync::cli::LogFlags logFlags;
  logFlags.addTo(app);
  CLI11_PARSE(app, argc, argv);
  logFlags.apply("wsync-coordinator");
  if (!fault.empty()) {
    auto spec = wsync::cli::parseFaultSpec(fault);
    if (!spec) {
      wsync::log::error("--fault: {}", spec.error());
      return 2;
    }
    options.faultHook = std::make_shared<wsync::cli::FaultInjector>(*spec);
  }
  if (!curveKeysPath.empty() || !allowKeysPath.empty()) {
    if (curveKeysPath.empty() || allowKeysPath.empty()) {
      wsync::log::error("CURVE needs both --curve-keys and --allow-keys");
      return 2;
    }
    auto keys = wsync::bus::readCurveKeyPair(curveKeysPath);
    auto allowed = wsync::bus::readCurveAllowlist(allowKeysPath);
    if (!keys || !allowed) {
      wsync::log::error("{}", !keys ? "--curve-keys: " + keys.error() : "--allow-keys: " + allowed.error());
      return 2;
    }
    options.curveKeys = std::move(*keys);
    options.allowedClientKeys = std::move(*allowed);
  }
  options.bucketBytes = bucketMiB << 20;
  options.gpuBucketBytes = gpuBucketMiB << 20;
  options.heartbeatInterval = std::chrono::milliseconds(heartbeatIntervalMs);
  options.heartbeatTimeout = std::chrono::milliseconds(heartbeatTimeoutMs);
  options.pauseTimeout = std::chrono::milliseconds(pauseTimeoutMs);
  options.transferTimeout = std::chrono::milliseconds(transferTimeoutMs);
  options.sourcesTimeout = std::chrono::milliseconds(sourcesTimeoutMs);
  options.link.timeout = std::chrono::milliseconds(linkTimeoutMs);
  options.receiveMemoryBudget = receiveBudgetMiB << 20;

  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  auto coordinator = Coordinator::start(options);
  if (!coordinator) {
    wsync::log::error("cannot start bus '{}': {}", options.bus, coordinator.error().describe());
    return coordinator.error().code == CoordinatorError::BusInUse ? 3 : 1;
  }
  struct sigaction action {};
  action.sa_handler = requestStop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  wsync::log::info("bus '{}' ready (epoch {:016x}, requests {}, events {})", options.bus, (*coordinator)->epoch(),
                   (*coordinator)->requestEndpoint(), (*coordinator)->eventEndpoint());
  (*coordinator)->run(stopRequested);
  const auto& stats = (*coordinator)->stats();
  wsync::log::info(
      "bus '{}' stopping: {} rounds committed, {} aborted, {} agents joined, {} died, {} requests "
      "rejected",
      options.bus, stats.roundsCommitted, stats.roundsAborted, stats.agentsJoined, stats.agentsDied,
      stats.requestsRejected);
  return 0;
}
