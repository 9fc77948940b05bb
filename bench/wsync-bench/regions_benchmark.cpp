// `wsync-bench regions`: region rounds over cuda_ipc on one GPU (docs/regions.md), M source processes holding FSDP2
// dim-0 shards of a model into receivers holding full tensors or tensor-parallel halves, beside a device copy of the
// bytes each receiver receives, in the same run.
//
// The processes are forked before this one touches CUDA (a forked CUDA context is unusable), share an anonymous
// shared mapping for the start of each round and the results, and open real cuda_ipc segments made by a real
// CudaIpcChannelOwner, so the receivers map the sources' memory through CUDA IPC as workers do. A round is timed by
// each receiver from the common start (every source publishes then) to its receiveRegions' return: the sources'
// checks, the receiver's copy and its checks, and the hand-offs. The baseline is the same receivers' cudaMemcpy of
// as many bytes each, device to device, in two halves one way and back (no second buffer of the size), all of them
// from a common start as in a round.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include <wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp>
#include <wsync/bus/channel/cuda_ipc/cuda_ipc_channel_owner.hpp>
#include <wsync/bus/channel/device_block.hpp>
#include <wsync/bus/channel/region_plan.hpp>
#include <wsync/bus/core/segment_name.hpp>
#include <wsync/bus/protocol/dtype.hpp>
#include <wsync/cli/model_catalog.hpp>
#include <wsync/cli/model_layouts.hpp>

#include "bench_failure.hpp"
#include "gpu.hpp"
#include "region_layouts.hpp"
#include "regions.hpp"

namespace wsync::bench {

cudaError_t launchContentFill(void* data, std::uint64_t bytes, std::uint64_t seed, std::uint32_t tensor,
                              std::uint64_t version, cudaStream_t stream);  // device_content.cu

namespace {

// A process's start: CUDA, a cudaMalloc of its share, the content, the plan (seconds for 100,000 tensors).
constexpr std::chrono::milliseconds kRegionSetupTimeout{300'000};
// A round of 63 GB at HBM speed takes tens of milliseconds; the bound only keeps a hang from stalling the run.
constexpr std::chrono::milliseconds kRegionRoundTimeout{60'000};
// The common start lies this far ahead of the parent's go: every process sees it while it spins.
constexpr std::chrono::milliseconds kRegionStartLead{20};
// Rounds measured at most per configuration (the shared results' size).
constexpr std::size_t kMaxRegionReps = 64;
constexpr std::size_t kMaxRegionReceivers = 2;

// What the processes share: written before the fork or by one process each.
struct SharedRun {
  std::atomic<std::uint32_t> ready;  // processes set up
  // steady_clock ns of each round's start (0: not yet), the rounds then the baseline's copies; processes done with it
  std::atomic<std::int64_t> start[2 * kMaxRegionReps];
  std::atomic<std::uint32_t> done[2 * kMaxRegionReps];
  std::atomic<std::uint32_t> failed;
  std::int64_t roundNs[kMaxRegionReps][kMaxRegionReceivers];
  std::int64_t copyNs[kMaxRegionReps][kMaxRegionReceivers];
  // The receiver's instants (IpcRoundTiming), from the start: every source's publish seen, the launches enqueued
  // (its table described or found), its checks reported (the copy ended), its sources told.
  std::int64_t phaseNs[kMaxRegionReps][kMaxRegionReceivers][4];
  std::uint64_t receivedBytes[kMaxRegionReceivers];
  char error[512];
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free);

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void check(cudaError_t error, const std::string& what) {
  if (error != cudaSuccess) throw BenchFailure(what + ": " + cudaGetErrorString(error));
}

template <typename T>
T orThrow(tl::expected<T, bus::ChannelFailure> value, const std::string& what) {
  if (!value) throw BenchFailure(what + ": " + value.error().describe());
  return std::move(*value);
}

// Views of `sizes` bytes each on the current device: back to back (256-byte aligned) in one block, as a flat
// parameter buffer holds them ("one"), or a block each, as a caching allocator gives large tensors ("tensor").
struct DeviceBuffers {
  std::vector<bus::DeviceBlock> blocks;
  std::vector<std::span<std::byte>> views;
};

DeviceBuffers allocate(int device, const std::vector<std::uint64_t>& sizes, const std::string& allocation) {
  DeviceBuffers buffers;
  auto take = [&](std::uint64_t bytes) -> std::byte* {
    auto block = bus::DeviceBlock::allocate(device, std::max<std::uint64_t>(bytes, 256));
    if (!block) throw BenchFailure("cudaMalloc of " + std::to_string(bytes) + " bytes: " + block.error());
    buffers.blocks.push_back(std::move(*block));
    return static_cast<std::byte*>(buffers.blocks.back().data());
  };
  if (allocation == "tensor") {
    for (const std::uint64_t size : sizes) buffers.views.emplace_back(take(size), size);
    return buffers;
  }
  std::uint64_t total = 0;
  std::vector<std::uint64_t> offsets;
  for (const std::uint64_t size : sizes) {
    offsets.push_back(total);
    total += (size + 255) / 256 * 256;
  }
  std::byte* base = take(total);
  for (std::size_t i = 0; i < sizes.size(); ++i) buffers.views.emplace_back(base + offsets[i], sizes[i]);
  return buffers;
}

// Waits until round `rep`'s start has been given and has come.
void waitForStart(const SharedRun& run, std::size_t rep) {
  const auto deadline = Clock::now() + kRegionRoundTimeout;
  while (run.start[rep].load(std::memory_order_acquire) == 0) {
    if (Clock::now() > deadline || run.failed.load() != 0)
      throw BenchFailure("no start for round " + std::to_string(rep));
    std::this_thread::yield();
  }
  while (nowNs() < run.start[rep].load()) {}
}

void runSource(SharedRun& run, const Layout& layout, const std::string& segment, std::uint32_t source,
               const RegionBenchConfig& config, std::size_t rounds) {
  const int device = config.device;
  check(cudaSetDevice(device), "cudaSetDevice");
  const bus::RegionPlan plan = planOf(layout);
  std::vector<std::uint64_t> sizes;
  for (const bus::HeldRegion& held : layout.sources[source].regions) {
    sizes.push_back(bus::volume(held.box) * bus::elementBytes(layout.manifest.tensors()[held.tensor].dtype));
  }
  DeviceBuffers buffers = allocate(device, sizes, config.sourceAllocation);
  for (std::size_t i = 0; i < buffers.views.size(); ++i) {
    check(launchContentFill(buffers.views[i].data(), buffers.views[i].size(), 7 + source, static_cast<std::uint32_t>(i),
                            1, nullptr),
          "fill");
  }
  check(cudaDeviceSynchronize(), "fill");
  auto channel = orThrow(bus::gpu::CudaIpcChannel::open(segment), "open the channel");
  channel->setAllocationsKept(true);
  const std::vector<std::span<const std::byte>> views(buffers.views.begin(), buffers.views.end());
  run.ready.fetch_add(1);
  for (std::size_t rep = 0; rep < rounds; ++rep) {
    waitForStart(run, rep);
    orThrow(channel->sendRegions(rep + 1, plan, source, views, Clock::now() + kRegionRoundTimeout),
            "source " + std::to_string(source) + " round " + std::to_string(rep));
    run.done[rep].fetch_add(1);
  }
  for (std::size_t rep = rounds; rep < 2 * rounds; ++rep) {  // the receivers' baseline: nothing of this side's
    waitForStart(run, rep);
    run.done[rep].fetch_add(1);
  }
}

void runReceiver(SharedRun& run, const Layout& layout, const std::string& segment, std::uint32_t receiver,
                 const RegionBenchConfig& config, std::size_t rounds) {
  const int device = config.device;
  check(cudaSetDevice(device), "cudaSetDevice");
  const bus::RegionPlan plan = planOf(layout);
  std::vector<std::uint64_t> sizes;
  for (const bus::LocalTensor& local : layout.receivers[receiver].locals) {
    sizes.push_back(bus::volume(bus::wholeBox(local.shape)) * bus::elementBytes(local.dtype));
  }
  DeviceBuffers locals = allocate(device, sizes, config.receiverAllocation);
  auto channel = orThrow(bus::gpu::CudaIpcChannel::open(segment), "open the channel");
  run.receivedBytes[receiver] = plan.bytesReceived(receiver);
  run.ready.fetch_add(1);
  for (std::size_t rep = 0; rep < rounds; ++rep) {
    waitForStart(run, rep);
    const std::int64_t start = run.start[rep].load();
    orThrow(channel->receiveRegions(rep + 1, plan, receiver, locals.views, Clock::now() + kRegionRoundTimeout),
            "receiver " + std::to_string(receiver) + " round " + std::to_string(rep));
    run.roundNs[rep][receiver] = nowNs() - start;
    const bus::IpcRoundTiming& timing = channel->lastTiming();
    const std::int64_t instants[4] = {timing.sawPublished, timing.launched, timing.copied, timing.reported};
    for (int phase = 0; phase < 4; ++phase) run.phaseNs[rep][receiver][phase] = instants[phase] - start;
    run.done[rep].fetch_add(1);
  }
  // The baseline: as many bytes copied device to device, half one way and back, in one block that takes the local
  // tensors' place (they may be blocks of their own). Every receiver copies from the same common start, as the
  // rounds have them copy at once, timed the same way: from the start to its copy's end.
  locals = DeviceBuffers{};
  const std::uint64_t half = plan.bytesReceived(receiver) / 2 / 256 * 256;
  const DeviceBuffers scratch = allocate(device, {2 * half}, "one");
  std::byte* base = scratch.views[0].data();
  for (std::size_t rep = 0; rep < rounds; ++rep) {
    waitForStart(run, rounds + rep);
    const std::int64_t start = run.start[rounds + rep].load();
    check(cudaMemcpyAsync(base + half, base, half, cudaMemcpyDeviceToDevice), "baseline copy");
    check(cudaMemcpyAsync(base, base + half, half, cudaMemcpyDeviceToDevice), "baseline copy");
    check(cudaStreamSynchronize(nullptr), "baseline copy");
    // Scaled to the bytes received exactly (the halves round down to 256 bytes).
    run.copyNs[rep][receiver] =
        static_cast<std::int64_t>(static_cast<double>(nowNs() - start) *
                                  static_cast<double>(plan.bytesReceived(receiver)) / static_cast<double>(2 * half));
    run.done[rounds + rep].fetch_add(1);
  }
}

// One process's part; a failure is written for the parent, which names it.
int runPart(SharedRun& run, const std::function<void()>& part) {
  try {
    part();
    return 0;
  } catch (const std::exception& error) {
    run.failed.store(1);
    std::strncpy(run.error, error.what(), sizeof(run.error) - 1);
    return 1;
  }
}

struct RegionRow {
  std::string model;
  std::string layout;
  std::uint32_t sources = 0;
  std::uint64_t receivedBytes = 0;  // per receiver, the largest
  std::vector<double> roundMs;      // the slowest receiver's, per round
  std::vector<double> copyMs;       // its baseline's
  std::vector<double> phaseMs[4];   // its instants (SharedRun::phaseNs)
  std::string skipped;
};

RegionRow measure(const RegionBenchConfig& config, const std::string& model, bool tp2, std::uint32_t sources) {
  RegionRow row;
  row.model = model;
  row.layout = tp2 ? "2 TP halves" : "1 whole";
  row.sources = sources;
  const Layout layout = layoutOf(model, sources, tp2);
  const auto receivers = static_cast<std::uint32_t>(layout.receivers.size());
  const std::size_t rounds = std::min(config.warmup + config.reps, kMaxRegionReps);
  bus::gpu::CudaIpcChannelOwner owner("bench-regions-" + std::to_string(::getpid()));
  std::vector<bus::ChannelMember> sourceMembers(sources);
  std::vector<bus::ChannelMember> receiverMembers(receivers);
  auto grant = owner.prepareSources(sourceMembers, receiverMembers);
  if (!grant) throw BenchFailure("segments: " + grant.error());
  void* mapped = ::mmap(nullptr, sizeof(SharedRun), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw BenchFailure("mmap of the shared results");
  auto* run = new (mapped) SharedRun{};
  std::vector<pid_t> children;
  for (std::uint32_t p = 0; p < sources + receivers; ++p) {
    const pid_t child = ::fork();
    if (child == 0) {
      const int status = runPart(*run, [&] {
        if (p < sources) {
          runSource(*run, layout, grant->segment, p, config, rounds);
        } else {
          runReceiver(*run, layout, grant->segment, p - sources, config, rounds);
        }
      });
      std::_Exit(status);
    }
    children.push_back(child);
  }
  const auto setupDeadline = Clock::now() + kRegionSetupTimeout;
  while (run->ready.load() < sources + receivers && run->failed.load() == 0 && Clock::now() < setupDeadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t rep = 0; rep < 2 * rounds && run->failed.load() == 0 && run->ready.load() == sources + receivers;
       ++rep) {
    run->start[rep].store(nowNs() + std::chrono::nanoseconds(kRegionStartLead).count(), std::memory_order_release);
    const auto deadline = Clock::now() + kRegionRoundTimeout;
    while (run->done[rep].load() < sources + receivers && run->failed.load() == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  bool failed = run->failed.load() != 0 || run->ready.load() < sources + receivers;
  for (const pid_t child : children) {
    int status = 0;
    if (failed) ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    failed = failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  if (failed) {
    row.skipped = run->error[0] != 0 ? std::string(run->error) : "a process did not finish";
  } else {
    for (std::uint32_t r = 0; r < receivers; ++r)
      row.receivedBytes = std::max(row.receivedBytes, run->receivedBytes[r]);
    for (std::size_t rep = config.warmup; rep < rounds; ++rep) {
      std::uint32_t slowest = 0;
      for (std::uint32_t r = 1; r < receivers; ++r) {
        if (run->roundNs[rep][r] > run->roundNs[rep][slowest]) slowest = r;
      }
      row.roundMs.push_back(static_cast<double>(run->roundNs[rep][slowest]) / 1e6);
      std::int64_t copyNs = 0;
      for (std::uint32_t r = 0; r < receivers; ++r) copyNs = std::max(copyNs, run->copyNs[rep][r]);
      row.copyMs.push_back(static_cast<double>(copyNs) / 1e6);
      for (int phase = 0; phase < 4; ++phase) {
        row.phaseMs[phase].push_back(static_cast<double>(run->phaseNs[rep][slowest][phase]) / 1e6);
      }
    }
  }
  ::munmap(mapped, sizeof(SharedRun));
  return row;
}

}  // namespace

void runRegionBenchmark(const RegionBenchConfig& config, Report& report) {
  report.parameters().update(Json{{"models", config.models},
                                  {"sources", config.sources},
                                  {"layouts", config.layouts},
                                  {"warmup", config.warmup},
                                  {"reps", config.reps},
                                  {"device", config.device},
                                  {"source_allocation", config.sourceAllocation},
                                  {"receiver_allocation", config.receiverAllocation}});
  Table table({{"model", "model"},
               {"receivers", "receivers"},
               {"sources", "M sources"},
               {"received_gib", "GiB per receiver"},
               {"round_ms", "round (ms)"},
               {"copy_ms", "device copy (ms)"},
               {"ratio", "round / copy"},
               {"goal", "<= 1.10x"}});
  Table phases({{"model", "model"},
                {"receivers", "receivers"},
                {"sources", "M sources"},
                {"published_ms", "every publish seen"},
                {"launched_ms", "launched"},
                {"checked_ms", "copy and checks done"},
                {"reported_ms", "sources told"},
                {"round_ms", "returned"}});
  for (const std::string& model : config.models) {
    for (const std::string& layoutName : config.layouts) {
      for (const std::uint32_t sources : config.sources) {
        std::cerr << "regions: " << model << ", " << layoutName << ", " << sources << " sources\n";
        RegionRow row;
        try {
          row = measure(config, model, layoutName == "tp2", sources);
        } catch (const std::exception& error) {
          row.skipped = error.what();
        }
        if (!row.skipped.empty()) {
          table.row({model, layoutName, sources, "", "", "", "", Cell(Json(nullptr), "skipped: " + row.skipped)});
          continue;
        }
        const Summary round = summarize(row.roundMs);
        const Summary copy = summarize(row.copyMs);
        const double ratioValue = copy.median > 0 ? round.median / copy.median : 0;
        table.row({model, row.layout, sources, number(static_cast<double>(row.receivedBytes) / (1ULL << 30), 2),
                   spread(round, "ms", 2), spread(copy, "ms", 2), ratio(ratioValue),
                   verdict(ratioValue <= kMaxRegionToCopyRatio)});
        phases.row({model, row.layout, sources, number(summarize(row.phaseMs[0]).median, 3),
                    number(summarize(row.phaseMs[1]).median, 3), number(summarize(row.phaseMs[2]).median, 3),
                    number(summarize(row.phaseMs[3]).median, 3), number(round.median, 3)});
      }
    }
  }
  report.section(
      "rounds", "Region rounds over cuda_ipc vs a device copy of the bytes each receiver receives",
      "M source processes hold FSDP2 dim-0 shards (cli::rowShards); the receivers bind every tensor whole, "
      "or tensor-parallel halves (row-parallel o_proj and down_proj by their last dim, the rest by dim 0). "
      "A round: from the common start to the slowest receiver's return (copy, sampled checks, hand-offs); "
      "the copy: cudaMemcpy of as many bytes on the same GPU, every receiver at once from a common start as in "
      "the rounds, timed the same way, in the same run. Medians (range).",
      table);
  report.section("phases", "Where a round's time goes (the slowest receiver, ms from the common start, medians)",
                 "The instants each receiver's channel keeps (IpcRoundTiming): every source's publish seen; the copy "
                 "and the checks enqueued (the table described, or found for the same layout); the checks' reports "
                 "read (the copy ended before them on the stream); each source's slot written and woken.",
                 phases);
  // Only now: this process touches CUDA after the last fork.
  report.json["machine"].update(describeGpus());
}

}  // namespace wsync::bench
