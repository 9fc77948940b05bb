#include "shm.hpp"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <thread>

#include <wsync/bus/channel/bucket_plan.hpp>
#include <wsync/bus/channel/shm/shm_arena.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "machine_load.hpp"
#include "tensor_memory.hpp"

namespace wsync::bench {
namespace {

// The three paths of a measurement, rotated every round so that none always runs first or after another.
enum class ShmPath : std::uint8_t { Channel, Memcpy, CopyDigest };
constexpr std::array kPaths{ShmPath::Channel, ShmPath::Memcpy, ShmPath::CopyDigest};

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

// A model loaded once for all its measurements: the sender's source and the memcpy baselines' copy.
struct ModelUnderTest {
  explicit ModelUnderTest(const std::string& model)
      : name(model), manifest(catalogManifest(model)), source(manifest), copy(manifest) {
    source.fill(kContentSeed);
  }
  std::string name;
  bus::Manifest manifest;
  TensorMemory source;
  TensorMemory copy;
  std::uint64_t version = 0;  // of the source's content
};

// One measurement's samples, GB/s of model bytes by wall-clock time and per CPU-second of the working thread.
struct ShmMeasurement {
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t modelBytes = 0;
  std::size_t receivers = 0;
  std::uint64_t bucketBytes = 0;
  std::uint32_t buffers = 0;
  std::uint32_t buckets = 0;  // of the plan
  // channel: until the last receiver finished; sender: until send() returned; copyDigest: memcpy, then XXH3-128 of
  // the copy; receiverCpu: the busiest receiver.
  std::vector<double> channel{}, sender{}, memcpy{}, copyDigest{};
  std::vector<double> senderCpu{}, receiverCpu{}, memcpyCpu{}, copyDigestCpu{};
  std::size_t digestsCompared = 0;  // receivers x transfers, warm-up included
  std::size_t digestsEqual = 0;     // a receiver's digest and byte count equal to the sender's
  std::string skipped{};            // why the measurement did not run; empty when it did
  double othersCpuShare = 0;
  std::size_t busyRounds = 0;  // --wait-for-quiet: rounds that started without the machine having been quiet
};

// One measurement: a model, an arena and its receivers; the paths' rounds and their samples.
class Measurement {
 public:
  Measurement(ModelUnderTest& model, ShmMeasurement& result, const std::string& arenaName, std::size_t rounds)
      : model_(model),
        result_(result),
        arena_(orThrow(bus::ShmArena::create(arenaName, {result.bucketBytes, result.buffers,
                                                         static_cast<std::uint32_t>(result.receivers)}),
                       "arena")),
        plan_(orThrow(bus::BucketPlan::build(model.manifest, result.bucketBytes, kPlanAlignment), "plan")) {
    result_.buckets = plan_.bucketCount();
    for (std::uint32_t i = 0; i < result.receivers; ++i) {
      receivers_.start("receiver " + std::to_string(i), "agent-shm-receive",
                       ShmReceiverOptions{arenaName, i, model.name, rounds}, true);
      ids_.push_back(i);
    }
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      const std::string line = receivers_.readLine(i, kReceiverReadyTimeout, "it to start");
      if (line != "ready") throw BenchFailure("receiver " + std::to_string(i) + " said '" + line + "' on start");
    }
  }

  void run(ShmPath path, bool measured) {
    throwIfInterrupted();
    // Untimed, before every path alike: a new version proves the receivers got this transfer's bytes.
    model_.source.moveToVersion(kContentSeed, ++model_.version);
    if (path == ShmPath::Channel) {
      channel(measured);
    } else {
      copy(measured, path == ShmPath::CopyDigest);
    }
  }

  // The receivers exit after their last transfer; reaped, their CPU time counts as ours.
  void finish() { receivers_.waitForAll(kAgentExitTimeout); }

 private:
  void channel(bool measured) {
    const std::uint64_t transfer = ++transfers_;
    const std::uint64_t bytes = result_.modelBytes;
    // send() blocks until the buckets are drained: a watchdog aborts the transfer when a receiver died or on Ctrl-C.
    std::jthread watchdog([this, transfer](const std::stop_token& stop) {
      while (!stop.stop_requested()) {
        if (interrupted() || receivers_.anyExited()) return arena_.abortTransfer(transfer);
        std::this_thread::sleep_for(kWatchdogInterval);
      }
    });
    const std::uint64_t cpuStart = threadCpuNanoseconds();
    const auto start = Clock::now();
    auto sent = arena_.send(transfer, plan_, model_.source.constTensors(), ids_, start + kShmTransferTimeout);
    const auto senderDone = Clock::now();
    const std::uint64_t senderCpuNs = threadCpuNanoseconds() - cpuStart;
    watchdog.request_stop();
    watchdog.join();
    if (!sent) {
      throwIfInterrupted();
      receivers_.throwIfAnyExited();  // the cause (a dead receiver) rather than the symptom (Aborted)
      throw BenchFailure("send of transfer " + std::to_string(transfer) + ": " + sent.error().describe());
    }
    Clock::time_point lastFinish = start;
    std::uint64_t receiverCpuNs = 0;
    for (std::size_t r = 0; r < ids_.size(); ++r) {
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
    result_.channel.push_back(gigabytesPerSecond(bytes, lastFinish - start));
    result_.sender.push_back(gigabytesPerSecond(bytes, senderDone - start));
    result_.senderCpu.push_back(gigabytesPerSecond(bytes, std::chrono::nanoseconds(senderCpuNs)));
    result_.receiverCpu.push_back(gigabytesPerSecond(bytes, std::chrono::nanoseconds(receiverCpuNs)));
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
    asm volatile("" : : : "memory");  // memory may have been read: a copy nothing reads is not dropped
    const auto elapsed = Clock::now() - start;
    const std::uint64_t cpuNs = threadCpuNanoseconds() - cpuStart;
    if (!measured) return;
    (digest ? result_.copyDigest : result_.memcpy).push_back(gigabytesPerSecond(result_.modelBytes, elapsed));
    (digest ? result_.copyDigestCpu : result_.memcpyCpu)
        .push_back(gigabytesPerSecond(result_.modelBytes, std::chrono::nanoseconds(cpuNs)));
  }

  ModelUnderTest& model_;
  ShmMeasurement& result_;
  bus::ShmArena arena_;
  const bus::BucketPlan plan_;
  std::vector<std::uint32_t> ids_;
  Agents receivers_;  // after the arena: stopped before it goes
  std::uint64_t transfers_ = 0;
};

ShmMeasurement measure(const ShmBenchConfig& config, ModelUnderTest& model, std::size_t receivers,
                       std::uint64_t bucketMiB, std::uint32_t buffers, std::ostream& progress) {
  static std::size_t arenas = 0;
  ShmMeasurement result{.model = model.name,
                        .tensors = model.manifest.size(),
                        .modelBytes = model.manifest.totalBytes(),
                        .receivers = receivers,
                        .bucketBytes = bucketMiB * kMiB,
                        .buffers = buffers};
  const std::uint64_t needed = receivers * result.modelBytes;
  const std::uint64_t available = availableMemoryBytes();
  if (static_cast<double>(needed) > kMaxMemoryShare * static_cast<double>(available)) {
    result.skipped = "the receivers' copies need " + gib(needed) + ", " + gib(available) + " available";
    progress << "  " << receivers << " receivers: skipped, " << result.skipped << '\n';
    return result;
  }
  const std::string arenaName = "wsync-bench-" + std::to_string(::getpid()) + "-shm-" + std::to_string(arenas++);
  const MachineLoad load;
  const std::size_t rounds = kShmWarmupRounds + config.repetitions;
  Measurement measurement(model, result, arenaName, rounds);
  progress << "  " << receivers << " receivers, " << bucketMiB << " MiB x " << buffers << " buffers (" << result.buckets
           << " buckets): " << kShmWarmupRounds << " warm-up + " << config.repetitions << " timed rounds\n";
  for (std::size_t round = 0; round < rounds; ++round) {
    if (config.waitForQuiet && !MachineLoad::waitForQuiet(kQuietMaxBusyShare, kQuietWindow, kQuietWaitLimit)) {
      ++result.busyRounds;
    }
    for (std::size_t k = 0; k < kPaths.size(); ++k) {
      measurement.run(kPaths[(round + k) % kPaths.size()], round >= kShmWarmupRounds);
    }
  }
  measurement.finish();
  result.othersCpuShare = load.othersShare();
  progress << "    channel " << fixed(summarize(result.channel).median, 2) << " GB/s per receiver, memcpy "
           << fixed(summarize(result.memcpy).median, 2) << " GB/s, digests equal " << result.digestsEqual << "/"
           << result.digestsCompared << ", other processes used " << percent(result.othersCpuShare).text
           << " of the CPUs\n";
  return result;
}

double median(const std::vector<double>& samples) { return summarize(samples).median; }
Cell gbps(const std::vector<double>& samples) { return number(median(samples), 2); }
double memcpyRatio(const ShmMeasurement& m) { return median(m.memcpy) > 0 ? median(m.channel) / median(m.memcpy) : 0; }

}  // namespace

int runShmReceiver(const ShmReceiverOptions& options) {
  auto arena = orThrow(bus::ShmArena::open(options.arena), "arena");
  const bus::Manifest manifest = catalogManifest(options.model);
  const auto plan = orThrow(bus::BucketPlan::build(manifest, arena.geometry().bucketBytes, kPlanAlignment), "plan");
  const TensorMemory staging(manifest);  // every page written once, before "ready"
  std::cout << "ready" << std::endl;     // flushed: stdout is a socket
  for (std::uint64_t transfer = 1; transfer <= options.transfers; ++transfer) {
    const std::uint64_t cpuStart = threadCpuNanoseconds();
    auto received =
        arena.receive(transfer, plan, staging.tensors(), options.receiver, Clock::now() + kReceiverIdleTimeout);
    const auto finish = Clock::now();
    const std::uint64_t cpuNs = threadCpuNanoseconds() - cpuStart;
    const bus::TransferResult result = orThrow(std::move(received), "transfer " + std::to_string(transfer));
    std::cout << "done " << transfer << ' ' << result.bytes << ' ' << result.digest.hi << ' ' << result.digest.lo << ' '
              << std::chrono::nanoseconds(finish.time_since_epoch()).count() << ' ' << cpuNs << std::endl;
  }
  return 0;
}

void runShmBenchmark(const ShmBenchConfig& c, Report& report) {
  const MachineLoad load;
  const std::uint64_t available = availableMemoryBytes();
  std::vector<ShmMeasurement> results;
  for (const std::string& name : c.models) {
    std::cerr << "model " << name << ": allocating and filling the source and the baseline's copy\n";
    ModelUnderTest model(name);
    for (const std::uint64_t bucketMiB : c.bucketMiB) {
      for (const std::uint32_t buffers : c.buffers) {
        results.push_back(measure(c, model, 1, bucketMiB, buffers, std::cerr));
      }
    }
    for (const std::size_t receivers : c.fanoutReceivers) {
      results.push_back(measure(c, model, receivers, c.bucketMiB.front(), c.buffers.front(), std::cerr));
    }
  }
  const double othersShare = load.othersShare();

  std::size_t busy = 0;
  for (const ShmMeasurement& m : results) busy += m.busyRounds;
  report.parameters().update(Json{
      {"models", c.models},
      {"fanout_receivers", c.fanoutReceivers},
      {"bucket_mib", c.bucketMiB},
      {"buffers", c.buffers},
      {"plan_alignment", kPlanAlignment},
      {"repetitions", c.repetitions},
      {"warmup_rounds", kShmWarmupRounds},
      {"wait_for_quiet", c.waitForQuiet},
      {"rounds_not_quiet", busy},
      {"memory_available", gib(available)},
      {"transparent_huge_pages", "anonymous " + selectedMode("/sys/kernel/mm/transparent_hugepage/enabled") + ", shm " +
                                     selectedMode("/sys/kernel/mm/transparent_hugepage/shmem_enabled")}});
  report.json["others_cpu_share"] = othersShare;

  Table transfers({{"model", "model"},
                   {"tensors", "tensors"},
                   {"bytes", "MiB"},
                   {"receivers", "receivers"},
                   {"geometry", "bucket MiB x buffers"},
                   {"buckets", "buckets"},
                   {"channel_gbps", "channel"},
                   {"aggregate_gbps", "aggregate"},
                   {"memcpy_gbps", "memcpy"},
                   {"ratio", "channel/memcpy"},
                   {"goal_met", "goal (>= " + fixed(kMinChannelToMemcpyRatio, 1) + "x, 1 receiver)"},
                   {"memcpy_xxh3_gbps", "memcpy+XXH3"},
                   {"sender_gbps", "sender alone"},
                   {"digests_equal", "digests equal"},
                   {"others_cpu_share", "others' CPU"}});
  Table cpu({{"model", "model"},
             {"receivers", "receivers"},
             {"geometry", "bucket MiB x buffers"},
             {"sender", "sender"},
             {"receiver", "receiver"},
             {"memcpy", "memcpy"},
             {"memcpy_xxh3", "memcpy+XXH3"},
             {"bound_ratio", "bound/memcpy"}});
  for (const ShmMeasurement& m : results) {
    const Cell size = number(mib(m.modelBytes), 0);
    const Cell geometry = std::to_string(m.bucketBytes / kMiB) + " x " + std::to_string(m.buffers);
    if (!m.skipped.empty()) {
      transfers.row({m.model, m.tensors, size, m.receivers, geometry, "", "skipped: " + m.skipped});
      continue;
    }
    transfers.row({m.model, m.tensors, size, m.receivers, geometry, m.buckets, spread(summarize(m.channel), "gbps", 2),
                   number(median(m.channel) * static_cast<double>(m.receivers), 2),
                   spread(summarize(m.memcpy), "gbps", 2), ratio(memcpyRatio(m)),
                   m.receivers == 1 ? verdict(memcpyRatio(m) >= kMinChannelToMemcpyRatio) : Cell(), gbps(m.copyDigest),
                   gbps(m.sender), digests(m.digestsEqual, m.digestsCompared), percent(m.othersCpuShare)});
    // The slower side per CPU-second against memcpy: the channel on separate cores with perfect overlap.
    const double slower = std::min(median(m.senderCpu), median(m.receiverCpu));
    cpu.row({m.model, m.receivers, geometry, gbps(m.senderCpu), gbps(m.receiverCpu), gbps(m.memcpyCpu),
             gbps(m.copyDigestCpu), ratio(median(m.memcpyCpu) > 0 ? slower / median(m.memcpyCpu) : 0)});
  }
  std::ostringstream intro;
  intro << "Channel: from the sender's call to `send` until the last receiver's `receive` returned, model bytes over "
           "that time (what each receiver got; aggregate: times the receivers). memcpy: the same tensors copied one by "
           "one in the sender's process into a second copy. Median (min-max) of the timed rounds. memcpy+XXH3: memcpy, "
           "then XXH3-128 over the copy. Sender alone: until `send` returned. Digests: every receiver's against the "
           "sender's, every transfer. Other processes used "
        << percent(othersShare).text << " of the CPUs during the run"
        << (std::thread::hardware_concurrency() <= 2 ? "; on 2 vCPUs the receivers of a fan-out share the cores, so "
                                                       "its figures measure CPU sharing as much as the channel"
                                                     : "")
        << ".";
  report.section("transfers", "One sender process, N receiver processes (GB/s)", intro.str(), transfers);
  report.section("cpu", "Work per side (GB per CPU-second)",
                 "Model bytes over the CPU time of the thread doing the work (a futex sleep costs none): how fast each "
                 "side would go on a core of its own. Receiver: the busiest. Bound/memcpy: the slower side against "
                 "memcpy, what the channel would reach on separate cores with perfect overlap.",
                 cpu);
}

}  // namespace wsync::bench
