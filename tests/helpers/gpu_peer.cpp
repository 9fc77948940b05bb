// gpu_peer: one side of a GPU channel (nccl or cuda_ipc) in a process of its own, for the tests in tests/gpu/.
// CUDA IPC only works between processes, and a peer that dies or freezes can only be played by a process. The test
// process owns what a channel needs to exist, as the coordinator does: the NCCL unique id (whose bootstrap root
// runs in the process that made it) or the cuda_ipc segment. This program sends or receives rounds 1..K through it.
//
//   gpu_peer --channel nccl     --role send    --unique-id HEX --receivers N [--device D] [options]
//   gpu_peer --channel nccl     --role receive --unique-id HEX --receivers N --receiver I [--device D] [options]
//   gpu_peer --channel cuda_ipc --role send    --segment NAME  --receivers N [--device D] [options]
//   gpu_peer --channel cuda_ipc --role receive --segment NAME  --receivers N --receiver I [--device D] [options]
// (gpu_peer --help lists every option.) For nccl the sender is rank 0 and receiver I is rank I + 1.
//
// Round R carries version R of the model's content under --seed (gpu_peer_protocol.hpp): the sender writes it on
// the host, copies it into its device tensors and sends; a receiver zeroes its device tensors, receives, copies
// them back and compares every byte. Both sides compare the byte count and digest the channel returned with the
// host reference (bus::deviceChecksumOfHost) of the content. Each tensor is a cudaMalloc of its own, or with
// --packed all of them share one allocation at odd offsets (pointers that are not 16-byte aligned).
//
// Faults, in round --fault-round (1 unless given): --die-after-ms X (SIGKILL on itself X ms after its transfer
// started, from a thread; 0: at once, before the transfer starts), --stop-before-transfer (SIGSTOP on itself just
// before it; the test SIGKILLs it later). Round 1 of nccl also connects the ranks (NCCL connects lazily), so a fault
// there and one in a later round take different paths. The cancel probe returns true once a process in --peer-pids
// or in --peer-pids-file (read once it exists: the test writes it when every peer is started) has ended: that is how
// a peer learns that the other side died, as an agent learns that its coordinator aborted the round.
//
// Output: the lines gpu_peer_protocol.hpp describes, on stdout; the reason of a failure also on stderr. Exit codes:
// gpu_peer::ExitCode.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <tl/expected.hpp>
#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp>
#include <wsync/bus/channel/device_checksum.hpp>
#include <wsync/bus/channel/gpu/gpu_runtime.hpp>
#include <wsync/bus/channel/nccl/nccl_channel.hpp>
#include <wsync/bus/protocol/manifest.hpp>

#include "gpu_peer_protocol.hpp"

namespace {

namespace bus = wsync::bus;
namespace gpu = wsync::bus::gpu;
using namespace wsync::test::gpu_peer;
using Clock = std::chrono::steady_clock;

// Every rank of a communicator must join within this. The test starts them together, but a cold CUDA context and
// NCCL's topology discovery take seconds on a loaded machine.
constexpr std::chrono::milliseconds kOpenTimeout{60'000};
// A transfer's own bound unless --deadline-ms says otherwise: above every wait of the tests, so that a stuck peer
// is ended by what the test does (a kill, a dead peer) or fails the test, not by its own deadline.
constexpr std::int64_t kDefaultDeadlineMs = 120'000;
// Packed layout: each tensor starts this far past a 32-byte boundary, in turn, so that pointers are neither 16- nor
// 8-byte aligned (1), 8- but not 16-byte aligned (8), 8-byte aligned with an odd multiple of 8 (24), or aligned to 2
// or 4 bytes only (2, 4, 12): the copy kernel has a path for each.
constexpr std::size_t kPackedOffsets[] = {1, 8, 24, 2, 4, 12};
constexpr std::size_t kPackedBoundary = 32;
// How long a peer that has moved all its rounds waits for the others to finish theirs (see PeerWatch): as long as
// the rounds of a slow peer can take.
constexpr std::chrono::milliseconds kFinishTimeout{60'000};
constexpr std::chrono::milliseconds kFinishPollInterval{5};

struct Options {
  std::string channel;
  std::string role;
  int device = 0;
  std::string uniqueIdHex;
  std::string segment;
  std::uint32_t receiver = 0;
  std::uint32_t receivers = 1;
  std::string model{kMixedModel};
  std::uint64_t bucketBytes = 64 * 1024;
  std::uint32_t alignment = kPlanAlignment;
  std::uint64_t rounds = 1;
  std::uint64_t seed = 1;
  std::int64_t stallMs = std::chrono::milliseconds{gpu::kNcclStallTimeout}.count();
  std::uint64_t firstSliceBytes = gpu::kNcclFirstSliceBytes;
  std::uint64_t maxSliceBytes = 0;
  std::string ncclHostId;
  std::int64_t deadlineMs = kDefaultDeadlineMs;
  std::int64_t dieAfterMs = -1;
  bool stopBeforeTransfer = false;
  std::uint64_t faultRound = 1;
  bool packed = false;
  std::uint64_t reallocateAtRound = 0;
  bool reuseAddresses = false;
  bool allocationsKept = false;
  std::vector<pid_t> peerPids;
  std::string peerPidsFile;

  bool sender() const { return role == "send"; }
  bool nccl() const { return channel == "nccl"; }
};

std::string cudaFailure(cudaError_t rc, const std::string& what) {
  return what + ": " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")";
}

// A failed round: one line on stdout for the test, the reason on stderr for a person.
int failRound(std::uint64_t round, ExitCode code, double ms, const std::string& reason) {
  std::printf("%.*s %" PRIu64 " %.*s exit=%d ms=%.1f %s\n", static_cast<int>(kRoundWord.size()), kRoundWord.data(),
              round, static_cast<int>(kFailWord.size()), kFailWord.data(), static_cast<int>(code), ms, reason.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "gpu_peer (pid %d): round %" PRIu64 ": %s\n", static_cast<int>(::getpid()), round,
               reason.c_str());
  return code;
}

int failSetup(const std::string& reason) {
  std::fprintf(stderr, "gpu_peer (pid %d): %s\n", static_cast<int>(::getpid()), reason.c_str());
  return kSetupFailed;
}

ExitCode exitCodeOf(bus::ChannelError error) {
  switch (error) {
    case bus::ChannelError::Timeout:
      return kTimedOut;
    case bus::ChannelError::Aborted:
      return kAborted;
    case bus::ChannelError::CommunicatorError:
      return kCommunicatorFailed;
    case bus::ChannelError::DigestMismatch:
      return kDigestMismatch;
    default:
      return kChannelFailed;
  }
}

// The peer's tensors in device memory: a cudaMalloc per tensor, or (packed) one allocation with each tensor at
// an odd offset. Zero-byte tensors get no memory of their own (a null pointer; in the packed layout, an address in
// the allocation).
class DeviceTensors {
 public:
  DeviceTensors(const bus::Manifest& manifest, bool packed) : manifest_(manifest), packed_(packed) {}
  DeviceTensors(const DeviceTensors&) = delete;
  DeviceTensors& operator=(const DeviceTensors&) = delete;
  ~DeviceTensors() { release(); }

  std::optional<std::string> allocate() {
    tensors_.assign(manifest_.size(), std::span<std::byte>{});
    if (!packed_) {
      for (std::size_t i = 0; i < manifest_.size(); ++i) {
        if (manifest_.tensorBytes(i) == 0) continue;
        void* memory = nullptr;
        if (const cudaError_t rc = cudaMalloc(&memory, manifest_.tensorBytes(i)); rc != cudaSuccess) {
          return cudaFailure(rc, "cudaMalloc of tensor " + std::to_string(i));
        }
        allocations_.push_back(memory);
        tensors_[i] = {static_cast<std::byte*>(memory), manifest_.tensorBytes(i)};
      }
      return std::nullopt;
    }
    std::vector<std::size_t> offsets;
    std::size_t cursor = 0;
    for (std::size_t i = 0; i < manifest_.size(); ++i) {
      cursor = (cursor + kPackedBoundary - 1) / kPackedBoundary * kPackedBoundary +
               kPackedOffsets[i % std::size(kPackedOffsets)];
      offsets.push_back(cursor);
      cursor += manifest_.tensorBytes(i);
    }
    void* memory = nullptr;
    if (const cudaError_t rc = cudaMalloc(&memory, cursor); rc != cudaSuccess) {
      return cudaFailure(rc, "cudaMalloc of the packed tensors");
    }
    allocations_.push_back(memory);
    for (std::size_t i = 0; i < manifest_.size(); ++i) {
      tensors_[i] = {static_cast<std::byte*>(memory) + offsets[i], manifest_.tensorBytes(i)};
    }
    return std::nullopt;
  }

  // New memory for every tensor, as a trainer whose tensors moved. By default the new allocations are made while
  // the old ones still exist, so every address changes; with `reuseAddresses` the old ones are freed first, and
  // cudaMalloc usually hands the same addresses back (a new allocation the receivers must not take for the old).
  // Returns whether any tensor's address changed.
  tl::expected<bool, std::string> reallocate(bool reuseAddresses) {
    const std::vector<std::span<std::byte>> before = tensors_;
    std::vector<void*> old = std::move(allocations_);
    allocations_.clear();
    if (reuseAddresses) {
      for (void* memory : old) cudaFree(memory);
      old.clear();
    }
    if (auto failed = allocate()) return tl::unexpected(*failed);
    for (void* memory : old) cudaFree(memory);
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].data() != before[i].data()) return true;
    }
    return false;
  }

  const std::vector<std::span<std::byte>>& tensors() const { return tensors_; }
  std::size_t allocationCount() const { return allocations_.size(); }

 private:
  void release() {
    for (void* memory : allocations_) cudaFree(memory);
    allocations_.clear();
  }

  const bus::Manifest& manifest_;
  bool packed_;
  std::vector<void*> allocations_;
  std::vector<std::span<std::byte>> tensors_;
};

// Whether `pid` has ended: gone, or a zombie that its parent (the test process) has not reaped yet.
bool processEnded(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const std::size_t nameEnd = line.rfind(')');  // the state follows the command name, which may hold spaces
  if (nameEnd == std::string::npos || nameEnd + 2 >= line.size()) return ::kill(pid, 0) != 0 && errno == ESRCH;
  const char state = line[nameEnd + 2];
  return state == 'Z' || state == 'X';
}

// The processes whose end makes this one give up its transfer: those named on the command line (the test process),
// and the peers of its group, listed in a file (whitespace-separated pids) that the test writes once it has started
// all of them. This process's own pid is skipped.
//
// A peer that has moved all its rounds does not exit before the others have too (finishTogether): NCCL's sender can
// finish a broadcast before a receiver has unpacked it, and a receiver whose probe saw the sender gone would give up
// a transfer that was about to succeed.
class PeerWatch {
 public:
  PeerWatch(std::vector<pid_t> watched, std::string groupFile)
      : watched_(std::move(watched)), groupFile_(std::move(groupFile)) {}

  bool anyEnded() {
    readGroup();
    for (const std::vector<pid_t>* pids : {&watched_, &group_}) {
      for (const pid_t pid : *pids) {
        if (!processEnded(pid)) continue;
        if (!reported_) std::fprintf(stderr, "gpu_peer (pid %d): peer %d has ended\n", ::getpid(), pid);
        reported_ = true;
        return true;
      }
    }
    return false;
  }

  // Marks this peer done, then waits until every peer of the group is done or has ended.
  void finishTogether() {
    if (groupFile_.empty()) return;
    std::ofstream(doneMarker(::getpid())).flush();
    const auto deadline = Clock::now() + kFinishTimeout;
    while (Clock::now() < deadline) {
      if (readGroup()) {
        const bool allDone = std::all_of(group_.begin(), group_.end(), [this](pid_t pid) {
          return std::ifstream(doneMarker(pid)).good() || processEnded(pid);
        });
        if (allDone) return;
      }
      std::this_thread::sleep_for(kFinishPollInterval);
    }
    std::fprintf(stderr, "gpu_peer (pid %d): the other peers did not finish within %lld ms; exiting anyway\n",
                 ::getpid(), static_cast<long long>(kFinishTimeout.count()));
  }

 private:
  // Whether the group is known: the file is written whole (renamed into place) by the test.
  bool readGroup() {
    if (groupRead_ || groupFile_.empty()) return groupRead_;
    std::ifstream in(groupFile_);
    if (!in) return false;
    for (pid_t pid = 0; in >> pid;) {
      if (pid != ::getpid()) group_.push_back(pid);
    }
    groupRead_ = true;
    return true;
  }

  std::string doneMarker(pid_t pid) const { return groupFile_ + ".done-" + std::to_string(pid); }

  std::vector<pid_t> watched_;
  std::string groupFile_;
  std::vector<pid_t> group_;
  bool groupRead_ = false;
  bool reported_ = false;
};

std::uint64_t residentKib() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t sizePages = 0;
  std::uint64_t residentPages = 0;
  statm >> sizePages >> residentPages;
  return residentPages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) / 1024;
}

struct GpuMemory {
  std::size_t free = 0;
  std::size_t total = 0;
};

GpuMemory gpuMemory() {
  GpuMemory memory;
  if (cudaMemGetInfo(&memory.free, &memory.total) != cudaSuccess) return {};
  return memory;
}

double millisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The first byte where a received tensor differs from the content, for the failure line.
std::string describeDifference(const bus::Manifest& manifest, std::size_t tensor, std::span<const std::byte> got,
                               std::span<const std::byte> want) {
  const auto mismatch = std::mismatch(got.begin(), got.end(), want.begin());
  const auto offset = static_cast<std::size_t>(mismatch.first - got.begin());
  std::size_t wrong = 0;
  for (std::size_t i = offset; i < got.size(); ++i) wrong += got[i] != want[i] ? 1U : 0U;
  return "tensor " + std::to_string(tensor) + " (" + manifest.tensors()[tensor].name + ", " +
         std::to_string(got.size()) + " bytes): " + std::to_string(wrong) + " bytes differ, the first at offset " +
         std::to_string(offset) + " (got " + std::to_string(std::to_integer<int>(*mismatch.first)) + ", want " +
         std::to_string(std::to_integer<int>(*mismatch.second)) + ")";
}

int run(const Options& options) {
  // Before NCCL reads its environment (its first call): a host id of its own makes NCCL take this process for
  // another node, which is how two ranks share one GPU.
  if (!options.ncclHostId.empty()) ::setenv("NCCL_HOSTID", options.ncclHostId.c_str(), 1);
  auto specs = peerModelTensors(options.model);
  if (!specs) return failSetup(specs.error().describe());
  auto manifest = bus::Manifest::create(std::move(*specs));
  if (!manifest) return failSetup(manifest.error().describe());
  auto plan = bus::BucketPlan::build(*manifest, options.bucketBytes, options.alignment);
  if (!plan) return failSetup(plan.error().describe());

  if (const cudaError_t rc = cudaSetDevice(options.device); rc != cudaSuccess) {
    return failSetup(cudaFailure(rc, "cudaSetDevice(" + std::to_string(options.device) + ")"));
  }
  DeviceTensors device(*manifest, options.packed);
  if (auto failed = device.allocate()) return failSetup(*failed);

  // Declared before the channel, which holds a probe that refers to it.
  PeerWatch peers(options.peerPids, options.peerPidsFile);
  std::unique_ptr<gpu::NcclChannel> ncclChannel;
  std::unique_ptr<gpu::CudaIpcChannel> ipcChannel;
  bus::Channel* channel = nullptr;
  const std::int32_t rank = options.sender() ? 0 : static_cast<std::int32_t>(options.receiver + 1);
  if (options.nccl()) {
    auto uniqueId = gpu::ncclUniqueIdFromHex(options.uniqueIdHex);
    if (!uniqueId) return failSetup("--unique-id: " + uniqueId.error().describe());
    gpu::NcclChannelConfig config;
    config.uniqueId = *uniqueId;
    config.rank = rank;
    config.worldSize = options.receivers + 1;
    config.stallTimeout = std::chrono::milliseconds{options.stallMs};
    config.firstSliceBytes = options.firstSliceBytes;
    config.maxSliceBytes = options.maxSliceBytes;
    auto opened = gpu::NcclChannel::open(config, Clock::now() + kOpenTimeout);
    if (!opened) return failSetup("opening the nccl channel: " + opened.error().describe());
    ncclChannel = std::move(*opened);
    channel = ncclChannel.get();
  } else {
    auto opened = gpu::CudaIpcChannel::open(options.segment);
    if (!opened) return failSetup("opening the cuda_ipc channel: " + opened.error().describe());
    ipcChannel = std::move(*opened);
    // As an agent names itself (ChannelSetup::agentId): the sender's faults name the receiver by it.
    if (!options.sender()) ipcChannel->setAgentId(std::string(kAgentIdPrefix) + std::to_string(options.receiver));
    channel = ipcChannel.get();
  }
  channel->setCancelProbe([&peers] { return peers.anyEnded(); });
  std::printf("open ok rank=%d device=%d pid=%d allocations=%zu\n", rank, options.device, ::getpid(),
              device.allocationCount());
  std::fflush(stdout);

  // The content on the host: what the sender sends, what a receiver must get. Receivers copy theirs back here.
  std::vector<std::vector<std::byte>> content;
  for (std::size_t i = 0; i < manifest->size(); ++i) content.emplace_back(manifest->tensorBytes(i));
  fillContent(content, options.seed);
  std::vector<std::vector<std::byte>> received;
  if (!options.sender()) received = content;
  const std::vector<std::span<const std::byte>> contentViews(content.begin(), content.end());

  std::size_t peakUsed = 0;
  for (std::uint64_t round = 1; round <= options.rounds; ++round) {
    moveContentToVersion(content, options.seed, round);
    bool moved = false;
    if (options.sender()) {
      if (round == options.reallocateAtRound) {
        auto reallocated = device.reallocate(options.reuseAddresses);
        if (!reallocated) return failRound(round, kSetupFailed, 0, reallocated.error());
        moved = *reallocated;
      }
      for (std::size_t i = 0; i < content.size(); ++i) {
        if (content[i].empty()) continue;
        const cudaError_t rc =
            cudaMemcpy(device.tensors()[i].data(), content[i].data(), content[i].size(), cudaMemcpyHostToDevice);
        if (rc != cudaSuccess) return failRound(round, kSetupFailed, 0, cudaFailure(rc, "uploading the tensors"));
      }
    } else {
      for (const std::span<std::byte> tensor : device.tensors()) {
        if (tensor.empty()) continue;
        if (const cudaError_t rc = cudaMemset(tensor.data(), 0, tensor.size()); rc != cudaSuccess) {
          return failRound(round, kSetupFailed, 0, cudaFailure(rc, "zeroing the tensors"));
        }
      }
    }
    // The channel reads and writes the tensors on its own streams: what was written on the default stream must be
    // complete before.
    if (const cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess) {
      return failRound(round, kSetupFailed, 0, cudaFailure(rc, "cudaDeviceSynchronize before the transfer"));
    }

    if (round == options.faultRound && options.stopBeforeTransfer) ::raise(SIGSTOP);
    if (round == options.faultRound && options.dieAfterMs == 0) ::kill(::getpid(), SIGKILL);
    if (round == options.faultRound && options.dieAfterMs > 0) {
      std::thread([delay = std::chrono::milliseconds{options.dieAfterMs}] {
        std::this_thread::sleep_for(delay);
        ::kill(::getpid(), SIGKILL);
      }).detach();
    }

    const GpuMemory before = gpuMemory();
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::milliseconds{options.deadlineMs};
    tl::expected<bus::TransferResult, bus::ChannelFailure> result;
    if (options.sender()) {
      const std::vector<std::span<const std::byte>> tensors(device.tensors().begin(), device.tensors().end());
      channel->setAllocationsKept(options.allocationsKept);
      result = channel->send(round, *plan, tensors, options.receivers, deadline);
    } else {
      result = channel->receive(round, *plan, device.tensors(), options.receiver, deadline);
    }
    const double ms = millisecondsSince(start);
    if (!result) return failRound(round, exitCodeOf(result.error().code), ms, result.error().describe());
    const GpuMemory after = gpuMemory();
    // Read at once: a receiver sees the segment's generation, which the sender changes when its next round exports.
    std::string ipcFields;
    if (ipcChannel) {
      ipcFields = " generation=" + std::to_string(ipcChannel->exportGeneration()) +
                  " handles=" + std::to_string(ipcChannel->openedHandles());
    }

    if (!options.sender()) {
      for (std::size_t i = 0; i < received.size(); ++i) {
        if (received[i].empty()) continue;
        const cudaError_t rc =
            cudaMemcpy(received[i].data(), device.tensors()[i].data(), received[i].size(), cudaMemcpyDeviceToHost);
        if (rc != cudaSuccess) return failRound(round, kSetupFailed, ms, cudaFailure(rc, "downloading the tensors"));
      }
      for (std::size_t i = 0; i < received.size(); ++i) {
        if (received[i] != content[i]) {
          return failRound(round, kWrongBytes, ms, describeDifference(*manifest, i, received[i], content[i]));
        }
      }
    }
    const bus::Digest reference = bus::deviceChecksumOfHost(contentViews);
    if (result->bytes != manifest->totalBytes() || !(result->digest == reference)) {
      return failRound(round, kWrongDigest, ms,
                       "the channel returned " + std::to_string(result->bytes) + " bytes, digest " +
                           digestHex(result->digest) + "; the host reference is " +
                           std::to_string(manifest->totalBytes()) + " bytes, digest " + digestHex(reference));
    }

    peakUsed = std::max({peakUsed, before.total - before.free, after.total - after.free});
    const bus::ChannelMemory channelMemory = ncclChannel ? ncclChannel->memory() : ipcChannel->memory();
    std::printf("%.*s %" PRIu64 " %.*s bytes=%" PRIu64
                " digest=%s ms=%.3f gpu_free_before=%zu gpu_free_after=%zu "
                "gpu_used_peak=%zu rss_kib=%" PRIu64 " channel_buffer_bytes=%" PRIu64 " channel_table_bytes=%" PRIu64
                "%s moved=%d\n",
                static_cast<int>(kRoundWord.size()), kRoundWord.data(), round, static_cast<int>(kOkWord.size()),
                kOkWord.data(), result->bytes, digestHex(result->digest).c_str(), ms, before.free, after.free, peakUsed,
                residentKib(), channelMemory.bufferBytes, channelMemory.tableBytes, ipcFields.c_str(), moved ? 1 : 0);
    std::fflush(stdout);
  }
  peers.finishTogether();
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  // NVLink SHARP (NVLS) multicast must stay off on the lent machines; the tests set it, this covers a manual run.
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);

  Options options;
  CLI::App app{"gpu_peer: one side of a GPU channel for the wsync GPU tests"};
  app.add_option("--channel", options.channel, "nccl | cuda_ipc")
      ->required()
      ->check(CLI::IsMember({"nccl", "cuda_ipc"}));
  app.add_option("--role", options.role, "send | receive")->required()->check(CLI::IsMember({"send", "receive"}));
  app.add_option("--device", options.device, "CUDA device")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--unique-id", options.uniqueIdHex, "nccl: the communicator's unique id, in hex");
  app.add_option("--segment", options.segment, "cuda_ipc: the segment the test created");
  app.add_option("--receiver", options.receiver, "receive: this receiver's index (nccl rank - 1)")
      ->capture_default_str();
  app.add_option("--receivers", options.receivers, "receivers of each transfer")
      ->capture_default_str()
      ->check(CLI::Range(1U, gpu::kMaxIpcReceivers));
  app.add_option("--model", options.model, "mixed | a name cli::modelTensors knows")->capture_default_str();
  app.add_option("--bucket-bytes", options.bucketBytes, "bucket size of the plan")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--alignment", options.alignment, "alignment of the plan (a power of two)")->capture_default_str();
  app.add_option("--rounds", options.rounds, "rounds to move")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", options.seed, "content seed")->capture_default_str();
  app.add_option("--stall-ms", options.stallMs, "nccl: stall watchdog")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--first-slice-bytes", options.firstSliceBytes, "nccl: the first and last broadcasts' size")
      ->capture_default_str();
  app.add_option("--max-slice-bytes", options.maxSliceBytes, "nccl: the largest broadcast (0: half a bucket)")
      ->capture_default_str();
  app.add_option("--nccl-host-id", options.ncclHostId,
                 "nccl: NCCL_HOSTID for this process (ranks of different ids may share a GPU over NCCL's network)");
  app.add_option("--deadline-ms", options.deadlineMs, "bound on each transfer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--die-after-ms", options.dieAfterMs, "SIGKILL itself this long into the fault round (0: before it)");
  app.add_flag("--stop-before-transfer", options.stopBeforeTransfer, "SIGSTOP itself just before the fault round");
  app.add_option("--fault-round", options.faultRound, "the round --die-after-ms and --stop-before-transfer apply to")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--packed", options.packed, "one allocation, tensors at odd offsets");
  app.add_option("--reallocate-at-round", options.reallocateAtRound, "send: new memory for every tensor in round R");
  app.add_flag("--reuse-addresses", options.reuseAddresses, "with --reallocate-at-round: free the old memory first");
  app.add_flag(
      "--allocations-kept", options.allocationsKept,
      "send: vouch every round that no tensor's allocation was freed in its place (Channel::setAllocationsKept)");
  app.add_option("--peer-pids", options.peerPids, "processes whose end cancels a transfer")->delimiter(',');
  app.add_option("--peer-pids-file", options.peerPidsFile, "more of them, in a file the test writes later");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? kOk : kUsage;
  }
  if (options.nccl() && options.uniqueIdHex.empty()) return std::fprintf(stderr, "--unique-id is required\n"), kUsage;
  if (!options.nccl() && options.segment.empty()) return std::fprintf(stderr, "--segment is required\n"), kUsage;
  if (!options.sender() && options.receiver >= options.receivers) {
    return std::fprintf(stderr, "--receiver must be below --receivers\n"), kUsage;
  }
  return run(options);
}
