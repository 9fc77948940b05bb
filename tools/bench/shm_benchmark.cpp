#include "shm_benchmark.hpp"

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
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/cli/model_catalog.hpp>
#include <wsync/bus/channel/shm/shm_arena.hpp>

#include "agent_pipe.hpp"
#include "agent_processes.hpp"
#include "bench_config.hpp"
#include "bench_failure.hpp"
#include "interruption.hpp"
#include "machine_load.hpp"
#include "report_format.hpp"
#include "tensor_memory.hpp"
#include "thread_cpu_time.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The three paths of a measurement, rotated every round so that none always runs first or after another.
enum class ShmPath : std::uint8_t { Channel, Memcpy, CopyDigest };
constexpr std::array kPaths{ShmPath::Channel, ShmPath::Memcpy, ShmPath::CopyDigest};

// Tells the compiler that memory may have been read, so a copy whose destination nothing reads is not dropped.
inline void keepMemory() { asm volatile("" : : : "memory"); }

double gigabytesPerSecond(std::uint64_t bytes, Clock::duration elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

Throughput summarise(std::vector<double> gbps) {
  Throughput result;
  result.samples = gbps.size();
  if (gbps.empty()) return result;
  std::sort(gbps.begin(), gbps.end());
  const std::size_t middle = gbps.size() / 2;
  result.medianGBps = gbps.size() % 2 == 1 ? gbps[middle] : (gbps[middle - 1] + gbps[middle]) / 2;
  result.minGBps = gbps.front();
  result.maxGBps = gbps.back();
  return result;
}

// MemAvailable from /proc/meminfo: what can be allocated without swapping or reclaim trouble.
std::uint64_t availableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// The mode in brackets of a /sys/kernel/mm/transparent_hugepage file ("always [madvise] never" -> "madvise").
std::string selectedMode(const std::string& path) {
  std::ifstream file(path);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto open = text.find('[');
  const auto close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "unknown";
  return text.substr(open + 1, close - open - 1);
}

std::string gib(double bytes) { return fixed(bytes / kGiB, 1) + " GiB"; }

// A model loaded once for all its measurements: the source the sender packs and the memcpy baselines read, and
// the copy the baselines write.
struct ModelUnderTest {
  std::string name;
  bus::Manifest manifest;
  TensorMemory source;
  TensorMemory copy;
  std::uint64_t version = 0;  // of the source's content
};

ModelUnderTest loadModel(const std::string& name) {
  auto specs = cli::modelTensors(name);
  if (!specs) throw BenchFailure("model " + name + ": " + specs.error().describe());
  auto manifest = bus::Manifest::create(std::move(*specs));
  if (!manifest) throw BenchFailure("model " + name + ": " + manifest.error().describe());
  TensorMemory source(*manifest);
  source.fill(kShmContentSeed);
  TensorMemory copy(*manifest);
  return ModelUnderTest{name, std::move(*manifest), std::move(source), std::move(copy), 0};
}

// What one receiver reported for one transfer ("done TRANSFER BYTES HI LO FINISH_NS CPU_NS").
struct ReceiverReport {
  std::uint64_t transfer = 0;
  bus::TransferResult result;
  Clock::time_point finish;
  std::uint64_t cpuNs = 0;
};

ReceiverReport parseReport(const std::string& line, std::size_t receiver) {
  std::istringstream fields(line);
  std::string word;
  ReceiverReport report;
  long long finishNs = 0;
  fields >> word >> report.transfer >> report.result.bytes >> report.result.digest.hi >> report.result.digest.lo >>
      finishNs >> report.cpuNs;
  if (!fields || word != "done") {
    throw BenchFailure("receiver " + std::to_string(receiver) + " reported '" + line + "'");
  }
  report.finish = Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(finishNs)));
  return report;
}

// The receiver processes of one measurement and the pipes they report on.
class Receivers {
 public:
  Receivers(const std::string& arena, const std::string& model, std::size_t count, std::uint64_t transfers) {
    for (std::size_t i = 0; i < count; ++i) {
      pipes_.emplace_back();
      agents_.spawn("receiver " + std::to_string(i),
                    {"agent-shm-receive", "--parent", std::to_string(::getpid()), "--arena", arena, "--receiver",
                     std::to_string(i), "--model", model, "--transfers", std::to_string(transfers)},
                    pipes_.back().writeEnd());
      pipes_.back().closeWriteEnd();
      ids_.push_back(static_cast<std::uint32_t>(i));
    }
  }

  const std::vector<std::uint32_t>& ids() const { return ids_; }

  // The next line of receiver `index`, or BenchFailure naming a receiver that died or went silent.
  std::string nextLine(std::size_t index, std::chrono::milliseconds timeout, const std::string& waitingFor) {
    auto line = pipes_[index].readLine(timeout);
    if (line) return *line;
    agents_.throwIfAnyExited();
    throw BenchFailure("receiver " + std::to_string(index) + " said nothing for " +
                       std::to_string(timeout.count()) + " ms while the benchmark waited for " + waitingFor);
  }

  void waitUntilReady() {
    for (std::size_t i = 0; i < pipes_.size(); ++i) {
      const std::string line = nextLine(i, kReceiverReadyTimeout, "it to start");
      if (line != "ready") throw BenchFailure("receiver " + std::to_string(i) + " said '" + line + "' on start");
    }
  }

  void waitForExit() { agents_.waitForAll(kAgentExitTimeout); }
  void throwIfAnyExited() { agents_.throwIfAnyExited(); }
  const AgentProcesses& agents() const { return agents_; }

 private:
  std::vector<AgentPipe> pipes_;
  AgentProcesses agents_;  // declared after the pipes: stopped and reaped before they close
  std::vector<std::uint32_t> ids_;
};

// `send` blocks until the receivers have drained the buckets, so while it runs the benchmark cannot look at them. A
// thread does, and aborts the transfer as a coordinator would when a receiver has died or the run is interrupted:
// neither then costs the whole kShmTransferTimeout.
class SendWatchdog {
 public:
  SendWatchdog(bus::ShmArena& arena, std::uint64_t transfer, const AgentProcesses& receivers)
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

// Timed samples of one measurement, path by path: GB/s of wall-clock time, and GB per CPU-second.
struct Samples {
  std::vector<double> channel;
  std::vector<double> sender;
  std::vector<double> memcpy;
  std::vector<double> copyDigest;
  std::vector<double> senderCpu;
  std::vector<double> receiverCpu;  // the receiver that took the most CPU time
  std::vector<double> memcpyCpu;
  std::vector<double> copyDigestCpu;
};

double gigabytesPerCpuSecond(std::uint64_t bytes, std::uint64_t cpuNs) {
  return gigabytesPerSecond(bytes, std::chrono::nanoseconds(cpuNs));
}

class Measurement {
 public:
  Measurement(ModelUnderTest& model, ShmMeasurement& result, bus::ShmArena& arena, const bus::BucketPlan& plan,
              Receivers& receivers)
      : model_(model), result_(result), arena_(arena), plan_(plan), receivers_(receivers) {}

  void run(ShmPath path, bool measured) {
    throwIfInterrupted();
    // Untimed, before every path alike: a new version proves that the receivers got this transfer's bytes, and
    // leaves the caches in the same state for every path.
    model_.source.moveToVersion(kShmContentSeed, ++model_.version);
    switch (path) {
      case ShmPath::Channel: channel(measured); break;
      case ShmPath::Memcpy: copy(measured, false); break;
      case ShmPath::CopyDigest: copy(measured, true); break;
    }
  }

  Samples& samples() { return samples_; }

 private:
  void channel(bool measured) {
    const std::uint64_t transfer = ++transfers_;
    std::optional<SendWatchdog> watchdog(std::in_place, arena_, transfer, receivers_.agents());
    const std::uint64_t cpuStart = threadCpuNanoseconds();
    const auto start = Clock::now();
    auto sent = arena_.send(transfer, plan_, model_.source.constTensors(), receivers_.ids(),
                            start + kShmTransferTimeout);
    const auto senderDone = Clock::now();
    const std::uint64_t senderCpuNs = threadCpuNanoseconds() - cpuStart;
    watchdog.reset();
    if (!sent) {
      throwIfInterrupted();
      receivers_.throwIfAnyExited();  // the cause (a dead receiver) rather than the symptom (Aborted)
      throw BenchFailure("send of transfer " + std::to_string(transfer) + ": " + sent.error().describe());
    }
    std::optional<Clock::time_point> lastFinish;
    std::uint64_t receiverCpuNs = 0;
    for (std::size_t r = 0; r < receivers_.ids().size(); ++r) {
      const ReceiverReport report = parseReport(
          receivers_.nextLine(r, kShmTransferTimeout, "transfer " + std::to_string(transfer)), r);
      if (report.transfer != transfer) {
        throw BenchFailure("receiver " + std::to_string(r) + " reported transfer " + std::to_string(report.transfer) +
                           " during transfer " + std::to_string(transfer));
      }
      ++result_.digestsCompared;
      if (report.result.digest == sent->digest && report.result.bytes == sent->bytes) ++result_.digestsEqual;
      lastFinish = lastFinish ? std::max(*lastFinish, report.finish) : report.finish;
      receiverCpuNs = std::max(receiverCpuNs, report.cpuNs);
    }
    if (!measured) return;
    samples_.channel.push_back(gigabytesPerSecond(result_.modelBytes, *lastFinish - start));
    samples_.sender.push_back(gigabytesPerSecond(result_.modelBytes, senderDone - start));
    samples_.senderCpu.push_back(gigabytesPerCpuSecond(result_.modelBytes, senderCpuNs));
    samples_.receiverCpu.push_back(gigabytesPerCpuSecond(result_.modelBytes, receiverCpuNs));
  }

  void copy(bool measured, bool digest) {
    const auto sources = model_.source.constTensors();
    const auto targets = model_.copy.tensors();
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
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
    (digest ? samples_.copyDigest : samples_.memcpy).push_back(gigabytesPerSecond(result_.modelBytes, elapsed));
    (digest ? samples_.copyDigestCpu : samples_.memcpyCpu).push_back(gigabytesPerCpuSecond(result_.modelBytes, cpuNs));
  }

  ModelUnderTest& model_;
  ShmMeasurement& result_;
  bus::ShmArena& arena_;
  const bus::BucketPlan& plan_;
  Receivers& receivers_;
  Samples samples_;
  std::uint64_t transfers_ = 0;
};

class ShmRun {
 public:
  ShmRun(const ShmBenchConfig& config, std::ostream& progress) : config_(config), progress_(progress) {}

  ShmMeasurement measure(ModelUnderTest& model, std::size_t receiverCount, std::uint64_t bucketBytes,
                         std::uint32_t buffers, std::size_t repetitions) {
    ShmMeasurement result;
    result.model = model.name;
    result.tensors = model.manifest.size();
    result.modelBytes = model.manifest.totalBytes();
    result.receivers = receiverCount;
    result.bucketBytes = bucketBytes;
    result.buffers = buffers;

    const std::uint64_t needed = receiverCount * model.manifest.totalBytes();
    const std::uint64_t available = availableMemoryBytes();
    if (static_cast<double>(needed) > kMaxMemoryShare * static_cast<double>(available)) {
      result.skipped = "the receivers' copies need " + gib(static_cast<double>(needed)) + ", " +
                       gib(static_cast<double>(available)) + " available";
      progress_ << "  " << receiverCount << " receivers: skipped, " << result.skipped << '\n';
      return result;
    }

    const std::string arenaName = "wsync-bench-" + std::to_string(::getpid()) + "-shm-" + std::to_string(arenas_++);
    arenaExample_ = arenaName;
    const bus::ArenaGeometry geometry{bucketBytes, buffers, static_cast<std::uint32_t>(receiverCount)};
    auto arena = bus::ShmArena::create(arenaName, geometry);
    if (!arena) throw BenchFailure("arena: " + arena.error().describe());
    auto plan = bus::BucketPlan::build(model.manifest, bucketBytes, kShmPlanAlignment);
    if (!plan) throw BenchFailure("plan: " + plan.error().describe());
    result.buckets = plan->bucketCount();

    const MachineLoad load;
    progress_ << "  " << receiverCount << " receiver" << (receiverCount == 1 ? "" : "s") << ", "
              << bucketBytes / kMiB << " MiB x " << buffers << " buffers (" << result.buckets << " buckets): "
              << kShmWarmupRounds << " warm-up + " << repetitions << " timed rounds\n";
    Receivers receivers(arenaName, model.name, receiverCount, kShmWarmupRounds + repetitions);
    receivers.waitUntilReady();

    Measurement measurement(model, result, *arena, *plan, receivers);
    for (std::size_t round = 0; round < kShmWarmupRounds + repetitions; ++round) {
      if (config_.waitForQuiet && !MachineLoad::waitForQuiet(kQuietMaxBusyShare, kQuietWindow, kQuietWaitLimit)) {
        ++result.busyRounds;
      }
      for (std::size_t k = 0; k < kPaths.size(); ++k) {
        measurement.run(kPaths[(round + k) % kPaths.size()], round >= kShmWarmupRounds);
      }
    }
    receivers.waitForExit();
    result.othersCpuShare = load.othersShare();  // the receivers are reaped, so their time counts as ours

    Samples& samples = measurement.samples();
    result.channel = summarise(std::move(samples.channel));
    result.sender = summarise(std::move(samples.sender));
    result.memcpy = summarise(std::move(samples.memcpy));
    result.copyDigest = summarise(std::move(samples.copyDigest));
    result.senderCpu = summarise(std::move(samples.senderCpu));
    result.receiverCpu = summarise(std::move(samples.receiverCpu));
    result.memcpyCpu = summarise(std::move(samples.memcpyCpu));
    result.copyDigestCpu = summarise(std::move(samples.copyDigestCpu));
    progress_ << "    channel " << fixed(result.channel.medianGBps, 2) << " GB/s per receiver, memcpy "
              << fixed(result.memcpy.medianGBps, 2) << " GB/s, digests equal " << result.digestsEqual << "/"
              << result.digestsCompared << ", other processes used " << static_cast<int>(result.othersCpuShare * 100)
              << "% of the CPUs\n";
    return result;
  }

  const std::string& arenaExample() const { return arenaExample_; }

 private:
  const ShmBenchConfig& config_;
  std::ostream& progress_;
  std::size_t arenas_ = 0;
  std::string arenaExample_;
};

}  // namespace

ShmResults runShmBenchmarks(const ShmBenchConfig& config, std::ostream& progress) {
  const MachineLoad load;
  ShmResults results;
  results.availableMemoryBytes = availableMemoryBytes();
  results.hugePages = "anonymous memory " + selectedMode("/sys/kernel/mm/transparent_hugepage/enabled") +
                      ", shm " + selectedMode("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  ShmRun run(config, progress);
  const std::uint64_t bucketBytes = config.bucketMiB * kMiB;
  for (const std::string& name : config.models) {
    progress << "model " << name << ": allocating and filling the source and the baseline's copy\n";
    ModelUnderTest model = loadModel(name);
    progress << "  " << model.manifest.size() << " tensors, " << model.manifest.totalBytes() << " bytes\n";
    results.single.push_back(run.measure(model, 1, bucketBytes, config.buffers, config.repetitions));
    for (const std::uint64_t sweepMiB : config.sweepBucketMiB) {
      for (const std::uint32_t sweepBuffers : config.sweepBuffers) {
        results.sweep.push_back(run.measure(model, 1, sweepMiB * kMiB, sweepBuffers, config.sweepRepetitions));
      }
    }
    for (const std::size_t receivers : config.fanoutReceivers) {
      results.fanout.push_back(run.measure(model, receivers, bucketBytes, config.buffers, config.repetitions));
    }
  }
  results.arenaExample = run.arenaExample();
  results.othersCpuShare = load.othersShare();
  return results;
}

}  // namespace wsync::bench
