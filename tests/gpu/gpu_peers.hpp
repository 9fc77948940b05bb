#pragma once
// Test support for the GPU channel tests: whether this machine can run them, and groups of gpu_peer processes (one
// sender, its receivers) started against a channel this test process owns, as the coordinator owns it: an NCCL
// unique id whose bootstrap root runs here, or a cuda_ipc segment created here.
//
// Nothing here touches CUDA until a test calls it, so listing the tests (gtest_discover_tests) works on any machine.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <wsync/cli/child_process.hpp>

#include "gpu_peer_protocol.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp"

namespace wsync::test {

using cli::ChildProcess;

// Why this machine cannot run a test that needs `devices` GPUs (and, for nccl, libnccl.so.2), or nothing.
std::optional<std::string> missingGpus(int devices);
std::optional<std::string> missingNcclGpus(int devices);

int visibleGpus();

// The content seed every test uses unless it says otherwise.
inline constexpr std::uint64_t kSeed = 20261122;
inline constexpr std::uint64_t kSmallBucketBytes = 64 * 1024;         // many buckets; tensors span several
inline constexpr std::uint64_t kLargeBucketBytes = 16 * 1024 * 1024;  // the mixed model in a single bucket

// One "round R ..." line a peer printed.
struct RoundReport {
  std::uint64_t round = 0;
  bool ok = false;
  std::map<std::string, std::string> fields;  // the key=value words
  std::string line;

  bool has(const std::string& key) const { return fields.count(key) != 0; }
  const std::string& text(const std::string& key) const;  // throws std::runtime_error when missing
  std::uint64_t number(const std::string& key) const;
};

struct GpuPeer {
  ChildProcess process;
  std::string name;        // "sender", "receiver 0", ... for messages
  std::string outputPath;  // the peer's stdout

  // The round lines so far (the file is read again on every call).
  std::vector<RoundReport> rounds() const;
  // Everything it printed, for failure messages.
  std::string output() const;
};

// How to start each peer of a group.
struct GroupOptions {
  std::string channel;   // "nccl" | "cuda_ipc"
  std::string endpoint;  // nccl: the unique id in hex; cuda_ipc: the segment's name
  std::string model{gpu_peer::kMixedModel};
  std::uint64_t bucketBytes = kSmallBucketBytes;
  std::uint64_t rounds = 1;
  std::uint64_t seed = kSeed;
  int senderDevice = 0;
  std::vector<int> receiverDevices;                                // one per receiver
  std::vector<std::string> senderArgs;                             // more gpu_peer options for the sender
  std::map<std::uint32_t, std::vector<std::string>> receiverArgs;  // ... for receiver I
  std::vector<std::string> everyPeerArgs;                          // ... for all of them
};

// The peers of one channel. The destructor SIGKILLs and reaps whatever still runs.
struct PeerGroup {
  GpuPeer sender;
  std::vector<GpuPeer> receivers;

  // Every peer, sender first.
  std::vector<GpuPeer*> all();
};

// Starts the receivers, then the sender, then writes the file through which each learns the others' pids (its
// cancel probe's peers). Every peer also watches this test process.
PeerGroup startGroup(const GroupOptions& options);

// A fresh NCCL unique id in hex; its bootstrap root runs in this process. Sets the NCCL environment first.
std::string ncclUniqueIdHex();

// A cuda_ipc segment of a name no other test uses, created (mode 0600) by this process and removed with it.
std::unique_ptr<bus::gpu::CudaIpcSegment> createIpcSegment();

// The digest of each version 1..rounds of `model` under `seed`, as gpu_peer_protocol.hpp defines the content and
// bus::deviceChecksumOfHost the digest: computed here, independently of the peers' own checks.
std::vector<std::string> referenceDigests(const std::string& model, std::uint64_t seed, std::uint64_t rounds);
std::uint64_t modelBytes(const std::string& model);

// Waits up to `timeout` for every peer to exit, then expects each to have exited 0 (it checked every byte and the
// host digest itself) and to have reported rounds 1..options.rounds with the model's byte count and the reference
// digest of each version, the same on every side.
void expectEveryRoundRight(PeerGroup& group, const GroupOptions& options, std::chrono::milliseconds timeout);

// 'R', 'S', 'T' (stopped), 'Z'..., or '?' when the process is gone.
char processState(pid_t pid);

// Polls `condition` until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

}  // namespace wsync::test
