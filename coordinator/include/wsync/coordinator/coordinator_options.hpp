#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wsync/bus/core/fault_hook.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/socket_options.hpp"

namespace wsync::coordinator {

// Agents beat this often (shared-memory word and Heartbeat message).
inline constexpr std::chrono::milliseconds kDefaultHeartbeatInterval{200};
// Ten missed beats before an agent counts as dead, so a briefly overloaded host is not mistaken for a dead one.
inline constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout{2000};
// Covers `wait` mode, where workers finish their in-flight generations before they acknowledge.
inline constexpr std::chrono::milliseconds kDefaultPauseTimeout{30'000};
// A sharded trainer's ranks begin a version each on their own (after their own optimizer step): the round waits
// this long after the first rank's BeginUpdate for the last (docs/regions.md). A rank's step seldom lags the others
// by more than seconds; a rank that never comes (it died, it publishes another version) is named when this runs out.
inline constexpr std::chrono::milliseconds kDefaultSourcesTimeout{30'000};
// The payload's base allowance; kTransferTimeoutPerGiB is added per GiB of the manifest.
inline constexpr std::chrono::milliseconds kDefaultTransferTimeout{120'000};
// Generous for a slow shared host: the shm channel moves several GB/s.
inline constexpr std::chrono::milliseconds kTransferTimeoutPerGiB{1'000};
// How often the loop checks heartbeats and phase deadlines when nothing arrives.
inline constexpr std::chrono::milliseconds kLivenessCheckInterval{20};
// The operator's pause changes (wsync-ctl pause / resume) at most this often: every change pauses or resumes every
// engine, and a client asking in a loop must not turn that into an engine pause per request. Short enough that an
// operator typing commands never sees the wait.
inline constexpr std::chrono::milliseconds kOperatorPauseInterval{200};
// 4 MiB buckets: faster than larger ones for the shm channel (docs/shm-channel.md, "Bucket size"): a bucket is still
// in cache when the receiver copies it out, and the pipeline fills and drains in a small fraction of the transfer;
// the hand-off per bucket costs microseconds.
inline constexpr std::uint64_t kDefaultBucketBytes = std::uint64_t{4} << 20;
inline constexpr std::uint32_t kDefaultBufferCount = 2;
// Buckets of the GPU channels (nccl, cuda_ipc): 1 GiB comes closer to one raw ncclBroadcast than 256 MiB
// (docs/gpu-channels.md, "Why the defaults"). Each side stages one of them in device memory (nccl, in two halves;
// the cuda_ipc channel copies without buffers), so GPU-memory-tight workers may prefer 256 MiB.
inline constexpr std::uint64_t kDefaultGpuBucketBytes = std::uint64_t{1} << 30;
// Every tensor starts at a multiple of this within its bucket: enough for any dtype and for vector copies.
inline constexpr std::uint32_t kDefaultAlignment = 256;
// Manifests kept by digest; a trainer re-declaring an older one resends it.
inline constexpr std::size_t kMaxCachedManifests = 8;
// Sources' holdings kept by digest (docs/regions.md): every rank of the largest sharded trainers of a few manifests;
// a rank whose holdings were dropped is refused as UnknownManifest and sends them again.
inline constexpr std::size_t kMaxCachedHoldings = 4096;
// Declarations the coordinator remembers having sent each agent; an agent that lacks one fails its round, and is
// sent everything again in the next.
inline constexpr std::size_t kMaxKnownDeclarations = 2 * kMaxCachedHoldings;
// Outcomes of the last rounds, for a trainer that lost its connection and asks what became of its version
// (VersionQuery): it asks within seconds, and this covers minutes of rounds back to back.
inline constexpr std::size_t kRoundHistory = 1024;
// Memory the request endpoint may hold beyond the coordinator's own: ZeroMQ assembles a message of many parts whole
// before handing it over (ZMQ_MAXMSGSIZE bounds each part, not their number), so a client could otherwise make the
// coordinator hold gigabytes. Past the budget the endpoint is reset (docs/security.md, "What no client can do").
// wsync-coordinator's default; 1 GiB is far above what its own capped state holds.
inline constexpr std::uint64_t kDefaultReceiveMemoryBudget = std::uint64_t{1} << 30;

struct CoordinatorOptions {
  std::string bus;
  std::string transport = "ipc";  // or tcp://HOST:PORT
  std::chrono::milliseconds heartbeatInterval = kDefaultHeartbeatInterval;
  std::chrono::milliseconds heartbeatTimeout = kDefaultHeartbeatTimeout;
  std::chrono::milliseconds pauseTimeout = kDefaultPauseTimeout;
  std::chrono::milliseconds sourcesTimeout = kDefaultSourcesTimeout;
  std::chrono::milliseconds transferTimeout = kDefaultTransferTimeout;
  std::uint64_t bucketBytes = kDefaultBucketBytes;
  std::uint32_t bufferCount = kDefaultBufferCount;
  std::uint64_t gpuBucketBytes = kDefaultGpuBucketBytes;  // nccl and cuda_ipc rounds
  std::uint32_t alignment = kDefaultAlignment;
  bus::LinkHeartbeat link{};  // how soon a connection whose agent stopped answering is dropped
  // Off (0) unless set: the check reads the whole process's heap, which is the coordinator's only where it owns the
  // process (wsync-coordinator sets kDefaultReceiveMemoryBudget); embedded beside other work it would misfire.
  std::uint64_t receiveMemoryBudget = 0;
  // tcp only (docs/security.md): the coordinator's CURVE key pair and the client public keys it admits; or
  // `insecure`, for plain tcp on a network the operator trusts. A tcp bus with neither refuses to start.
  std::optional<bus::CurveKeyPair> curveKeys{};
  std::vector<std::string> allowedClientKeys{};
  bool insecure = false;
  // Test only (tests/faults, docs/faults.md): called at each point of each round; none in production.
  std::shared_ptr<bus::FaultHook> faultHook{};
};

}  // namespace wsync::coordinator
