#include "shm.hpp"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/shm/shm_arena.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "machine_load.hpp"
#include "tensor_memory.hpp"
#include "machine_load.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMiB = 1024 * 1024;

// The three paths of a measurement, rotated every round so that none always runs first or after another.
enum class ShmPath : std::uint8_t { Channel, Memcpy, CopyDigest };
constexpr std::array kPaths{ShmPath::Channel, ShmPath::Memcpy, ShmPath::CopyDigest};

// Tells the compiler that memory may have been read, so a copy whose destination nothing reads is not dropped.
inline void keepMemory() { asm volatile("" : : : "memory"); }

double gigabytesPerSecond(std::uint64_t bytes, std::chrono::nanoseconds elapsed) {
  return elapsed.count() > 0 ? static_cast<double>(bytes) / static_cast<double>(elapsed.count()) : 0;
}

// The mode in brackets of a /sys/kernel/mm/transparent_hugepage file ("always [madvise] never" -> "madvise").
std::string selectedMode(const std::string& path) {
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto open = text.find('[');
  const auto close = text.find(']', open);
  return open == std::string::npos || close == std::string::npos ? "unknown" : text.substr(open + 1, close - open - 1);
}

std::string gib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / (1024.0 * kMiB), 1) + " GiB"; }

// A model loaded once for all its measurements: the source the sender packs and the memcpy baselines read, and the
// copy the baselines write.
struct ModelUnderTest {
  explicit ModelUnderTest(const std::string& model)
      : name(model), manifest(catalogManifest(model)), source(manifest), copy(manifest) {
    source.fill(kShmContentSeed);
  }
  std::string name;
  bus::Manifest manifest;
  TensorMemory source;
  TensorMemory copy;
  std::uint64_t version = 0;  // of the source's content
};

// `send` blocks until the receivers have drained the buckets, so while it runs the benchmark cannot look at them. A
// thread does, and aborts the transfer as a coordinator would when a receiver has died or the run is interrupted:
// neither then costs the whole kShmTransferTimeout.
class SendWatchdog {
 public:
  SendWatchdog(bus::ShmArena& arena, std::uint64_t transfer, const Agents& receivers)
      : thread_([this, &arena, transfer, &receivers] {
          while (!stop_.load(std::memory_order_acquire)) {
            if (interrupted() || receivers.anyExited()) {
              arena.abortTransfer(transfer);
              return;
            }
            std::this_thread::sleep_for(kWatchdogInterval);
          }
        }) {}
  SendWatchdog(const SendWatchdog&) = delete;
  SendWatchdog& operator=(const SendWatchdog&) = delete;
  ~SendWatchdog() {
    stop_.store(true, std::memory_order_release);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once stop_ exists
};

// One measurement: a model, an arena and its receivers; the paths' rounds and their samples (GB/s of wall-clock time,
// and GB per CPU-second).
class Measurement {
 public:
  Measurement(ModelUnderTest& model, ShmMeasurement& result, const std::string& arenaName, std::size_t rounds)
      : model_(model),
        result_(result),
        arena_(orThrow(bus::ShmArena::create(arenaName, {result.bucketBytes, result.buffers,
                                                         static_cast<std::uint32_t>(result.receivers)}),
                       "arena")),
        plan_(orThrow(bus::BucketPlan::build(model.manifest, result.bucketBytes, kShmPlanAlignment), "plan")) {
    result_.buckets = plan_.bucketCount();
    for (std::uint32_t i = 0; i < result.receivers; ++i) {
      receivers_.start("receiver " + std::to_string(i),
                       {"agent-shm-receive", "--arena", arenaName, "--receiver", std::to_string(i), "--model",
                        model.name, "--transfers", std::to_string(rounds)},
                       Agents::Link::Reports);
      ids_.push_back(i);
    }
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      const std::string line = receivers_.readLine(i, kReceiverReadyTimeout, "it to start");
      if (line != "ready") throw BenchFailure("receiver " + std::to_string(i) + " said '" + line + "' on start");
    }
  }

  void run(ShmPath path, bool measured) {
    throwIfInterrupted();
    // Untimed, before every path alike: a new version proves that the receivers got this transfer's bytes, and
    // leaves the caches in the same state for every path.
    model_.source.moveToVersion(kShmContentSeed, ++model_.version);
    if (path == ShmPath::Channel) {
      channel(measured);
    } else {
      copy(measured, path == ShmPath::CopyDigest);
    }
  }

  // The receivers exit after their last transfer: reaped, their CPU time counts as this process's.
  void finish() {
    receivers_.waitForAll(kAgentExitTimeout);
    result_.channel = summarize(std::move(channel_));
    result_.sender = summarize(std::move(sender_));
    result_.memcpy = summarize(std::move(memcpy_));
    result_.copyDigest = summarize(std::move(copyDigest_));
    result_.senderCpu = summarize(std::move(senderCpu_));
    result_.receiverCpu = summarize(std::move(receiverCpu_));
    result_.memcpyCpu = summarize(std::move(memcpyCpu_));
    result_.copyDigestCpu = summarize(std::move(copyDigestCpu_));
  }

 private:
  void channel(bool measured) {
    const std::uint64_t transfer = ++transfers_;
    const std::uint64_t bytes = result_.modelBytes;
    std::optional<SendWatchdog> watchdog(std::in_place, arena_, transfer, receivers_);
    const std::uint64_t cpuStart = threadCpuNanoseconds();
    const auto start = Clock::now();
    auto sent = arena_.send(transfer, plan_, model_.source.constTensors(), ids_, start + kShmTransferTimeout);
    const auto senderDone = Clock::now();
    const std::uint64_t senderCpuNs = threadCpuNanoseconds() - cpuStart;
    watchdog.reset();
    if (!sent) {
      throwIfInterrupted();
      receivers_.throwIfAnyExited();  // the cause (a dead receiver) rather than the symptom (Aborted)
      throw BenchFailure("send of transfer " + std::to_string(transfer) + ": " + sent.error().describe());
    }
    Clock::time_point lastFinish = start;
    std::uint64_t receiverCpuNs = 0;
    for (std::size_t r = 0; r < ids_.size(); ++r) {
      // "done TRANSFER BYTES HI LO FINISH_NS CPU_NS"
      const std::string line = receivers_.readLine(r, kShmTransferTimeout, "transfer " + std::to_string(transfer));
      std::istringstream fields(line);
      std::string word;
      std::uint64_t reported = 0;
      bus::TransferResult got;
      std::int64_t finishNs = 0;
      std::uint64_t cpuNs = 0;
      fields >> word >> reported >> got.bytes >> got.digest.hi >> got.digest.lo >> finishNs >> cpuNs;
      if (!fields || word != "done" || reported != transfer) {
        throw BenchFailure("receiver " + std::to_string(r) + " reported '" + line + "' for transfer " +
                           std::to_string(transfer));
      }
      ++result_.digestsCompared;
      if (got.digest == sent->digest && got.bytes == sent->bytes) ++result_.digestsEqual;
      lastFinish = std::max(lastFinish, Clock::time_point(std::chrono::nanoseconds(finishNs)));
      receiverCpuNs = std::max(receiverCpuNs, cpuNs);
    }
    if (!measured) return;
    channel_.push_back(gigabytesPerSecond(bytes, lastFinish - start));
    sender_.push_back(gigabytesPerSecond(bytes, senderDone - start));
    senderCpu_.push_back(gigabytesPerSecond(bytes, std::chrono::nanoseconds(senderCpuNs)));
    receiverCpu_.push_back(gigabytesPerSecond(bytes, std::chrono::nanoseconds(receiverCpuNs)));
  }

  void copy(bool measured, bool digest) {
    const auto sources = model_.source.constTensors();
    const auto targets = model_.copy.tensors();
    const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
    const std::uint64_t cpuStart = threadCpuNanoseconds();
    const auto start = Clock::now();
    if (digest) XXH3_128bits_reset(state.get());
    for (std::size_t i = 0; i < sources.size(); ++i) {
      std::memcpy(targets[i].data(), sources[i].data(), sources[i].size());
      if (digest) XXH3_128bits_update(state.get(), targets[i].data(), targets[i].size());
    }
    if (digest) (void)XXH3_128bits_digest(state.get());
    keepMemory();
    const auto elapsed = Clock::now() - start;
    const std::uint64_t cpuNs = threadCpuNanoseconds() - cpuStart;
    if (!measured) return;
    (digest ? copyDigest_ : memcpy_).push_back(gigabytesPerSecond(result_.modelBytes, elapsed));
    (digest ? copyDigestCpu_ : memcpyCpu_)
        .push_back(gigabytesPerSecond(result_.modelBytes, std::chrono::nanoseconds(cpuNs)));
  }

  ModelUnderTest& model_;
  ShmMeasurement& result_;
  bus::ShmArena arena_;
  const bus::BucketPlan plan_;
  std::vector<std::uint32_t> ids_;
  Agents receivers_;  // after the arena: stopped before it goes
  std::uint64_t transfers_ = 0;
  std::vector<double> channel_, sender_, memcpy_, copyDigest_, senderCpu_, receiverCpu_, memcpyCpu_, copyDigestCpu_;
};

ShmMeasurement measure(const ShmBenchConfig& config, ModelUnderTest& model, std::size_t receivers,
                       std::uint64_t bucketBytes, std::uint32_t buffers, std::size_t repetitions,
                       std::string& arenaName, std::ostream& progress) {
  static std::size_t arenas = 0;
  ShmMeasurement result;
  result.model = model.name;
  result.tensors = model.manifest.size();
  result.modelBytes = model.manifest.totalBytes();
  result.receivers = receivers;
  result.bucketBytes = bucketBytes;
  result.buffers = buffers;
  const std::uint64_t needed = receivers * result.modelBytes;
  const std::uint64_t available = availableMemoryBytes();
  if (static_cast<double>(needed) > kMaxMemoryShare * static_cast<double>(available)) {
    result.skipped = "the receivers' copies need " + gib(needed) + ", " + gib(available) + " available";
    progress << "  " << receivers << " receivers: skipped, " << result.skipped << '\n';
    return result;
  }
  arenaName = "wsync-bench-" + std::to_string(::getpid()) + "-shm-" + std::to_string(arenas++);
  const MachineLoad load;
  Measurement measurement(model, result, arenaName, kShmWarmupRounds + repetitions);
  progress << "  " << receivers << " receivers, " << bucketBytes / kMiB << " MiB x " << buffers << " buffers ("
           << result.buckets << " buckets): " << kShmWarmupRounds << " warm-up + " << repetitions << " timed rounds\n";
  for (std::size_t round = 0; round < kShmWarmupRounds + repetitions; ++round) {
    if (config.waitForQuiet && !MachineLoad::waitForQuiet(kQuietMaxBusyShare, kQuietWindow, kQuietWaitLimit)) {
      ++result.busyRounds;
    }
    for (std::size_t k = 0; k < kPaths.size(); ++k) {
      measurement.run(kPaths[(round + k) % kPaths.size()], round >= kShmWarmupRounds);
    }
  }
  measurement.finish();
  result.othersCpuShare = load.othersShare();
  progress << "    channel " << fixed(result.channel.median, 2) << " GB/s per receiver, memcpy "
           << fixed(result.memcpy.median, 2) << " GB/s, digests equal " << result.digestsEqual << "/"
           << result.digestsCompared << ", other processes used " << percent(result.othersCpuShare) << " of the CPUs\n";
  return result;
}

}  // namespace

ShmResults measureShm(const ShmBenchConfig& config, std::ostream& progress) {
  const MachineLoad load;
  ShmResults results;
  results.availableMemoryBytes = availableMemoryBytes();
  results.hugePages = "anonymous memory " + selectedMode("/sys/kernel/mm/transparent_hugepage/enabled") + ", shm " +
                      selectedMode("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  const std::uint64_t bucketBytes = config.bucketMiB * kMiB;
  for (const std::string& name : config.models) {
    progress << "model " << name << ": allocating and filling the source and the baseline's copy\n";
    ModelUnderTest model(name);
    const auto one = [&](std::size_t receivers, std::uint64_t bucket, std::uint32_t buffers, std::size_t reps) {
      return measure(config, model, receivers, bucket, buffers, reps, results.arenaExample, progress);
    };
    results.single.push_back(one(1, bucketBytes, config.buffers, config.repetitions));
    for (const std::uint64_t sweepMiB : config.sweepBucketMiB) {
      for (const std::uint32_t buffers : config.sweepBuffers) {
        results.sweep.push_back(one(1, sweepMiB * kMiB, buffers, config.sweepRepetitions));
      }
    }
    for (const std::size_t receivers : config.fanoutReceivers) {
      results.fanout.push_back(one(receivers, bucketBytes, config.buffers, config.repetitions));
    }
  }
  results.othersCpuShare = load.othersShare();
  return results;
}

}  // namespace wsync::bench
