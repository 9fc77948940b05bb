#include "gpu.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp>
#include <wsync/bus/channel/nccl/nccl_channel.hpp>
#include <wsync/bus/channel/gpu/gpu_runtime.hpp>
#include <wsync/bus/protocol/manifest.hpp>

#include "agents.hpp"
#include "bench_failure.hpp"
#include "tensor_memory.hpp"
#include "gpu_rank_protocol.hpp"

namespace wsync::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// How often a wait for a rank's exit status looks again, after its socket closed.
constexpr std::chrono::milliseconds kExitPollInterval{10};

std::string gib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / kGiB, 1) + " GiB"; }

std::int64_t nanosecondsOf(Clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

double millisecondsBetween(std::int64_t startNs, std::int64_t endNs) {
  return static_cast<double>(endNs - startNs) / 1e6;
}

std::string hexId() {
  auto id = bus::gpu::makeNcclUniqueId();
  if (!id) throw BenchFailure("NCCL unique id: " + id.error().describe());
  return bus::gpu::toHex(*id);
}

// The rank processes of one measurement and the sockets they take commands on and report through.
class GpuRanks {
 public:
  GpuRanks() = default;
  GpuRanks(const GpuRanks&) = delete;
  GpuRanks& operator=(const GpuRanks&) = delete;

  void start(const std::string& label, const GpuRankOptions& options) {
    agents_.start(label, "agent-gpu-rank", options, true);
  }

  std::size_t size() const { return agents_.size(); }
  const std::string& label(std::size_t rank) const { return agents_.label(rank); }

  // Called before a dead or silent rank is reported, while the others may still wait on it (cuda_ipc: the
  // segment's abort, so that they give up at once instead of at their deadline).
  void onFailure(std::function<void()> hook) { onFailure_ = std::move(hook); }

  void send(std::size_t rank, const RankLine& command) {
    try {
      agents_.pipe(rank).writeLine(command.dump());
    } catch (const BenchFailure&) {
      failed(rank, command.dump() + " to be sent");
    }
  }

  void sendAll(const RankLine& command) {
    for (std::size_t rank = 0; rank < size(); ++rank) send(rank, command);
  }

  // The next line of one rank, whatever its word.
  RankLine next(std::size_t rank, std::chrono::milliseconds timeout, const std::string& waitingFor) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (auto line = agents_.pipe(rank).readLine(kCollectSlice)) return parseRankLine(*line, label(rank));
      if (agents_.pipe(rank).ended() || agents_.anyExited()) failed(rank, waitingFor);
      if (Clock::now() > deadline) silent({rank}, timeout, waitingFor);
    }
  }

  RankLine expect(std::size_t rank, const std::string& word, std::chrono::milliseconds timeout,
                  const std::string& waitingFor) {
    RankLine line = next(rank, timeout, waitingFor);
    if (bench::word(line) != word) throw BenchFailure(label(rank) + " said " + line.dump() + " instead of " + word);
    return line;
  }

  // The next line of every rank, read as they come: a rank that dies meanwhile is reported at once, whichever
  // rank the others wait for.
  std::vector<RankLine> collect(const std::string& word, std::chrono::milliseconds timeout,
                                const std::string& waitingFor) {
    std::vector<std::optional<RankLine>> lines(size());
    std::size_t pending = size();
    const auto deadline = Clock::now() + timeout;
    while (pending > 0) {
      for (std::size_t rank = 0; rank < size(); ++rank) {
        if (lines[rank]) continue;
        if (auto line = agents_.pipe(rank).readLine(kCollectSlice)) {
          lines[rank] = parseRankLine(*line, label(rank));
          if (bench::word(*lines[rank]) != word) {
            throw BenchFailure(label(rank) + " said '" + *line + "' while the benchmark waited for " + waitingFor);
          }
          --pending;
        } else if (agents_.pipe(rank).ended()) {
          failed(rank, waitingFor);
        }
      }
      if (pending > 0 && agents_.anyExited()) failed(0, waitingFor);
      if (pending > 0 && Clock::now() > deadline) {
        std::vector<std::size_t> quiet;
        for (std::size_t rank = 0; rank < size(); ++rank) {
          if (!lines[rank]) quiet.push_back(rank);
        }
        silent(quiet, timeout, waitingFor);
      }
    }
    std::vector<RankLine> result;
    for (auto& line : lines) result.push_back(std::move(*line));
    return result;
  }

  void quit() {
    sendAll({{"command", "quit"}});
    agents_.waitForAll(kRankExitTimeout);
  }

 private:
  // A rank closed its socket or exited: names every rank that has exited, with its status.
  [[noreturn]] void failed(std::size_t rank, const std::string& waitingFor) {
    if (onFailure_) onFailure_();
    throwIfInterrupted();
    const auto until = Clock::now() + kExitNoticeTimeout;
    while (!agents_.anyExited() && Clock::now() < until) std::this_thread::sleep_for(kExitPollInterval);
    agents_.throwIfAnyExited();
    throw BenchFailure(label(rank) + " closed its socket while the benchmark waited for " + waitingFor);
  }

  [[noreturn]] void silent(const std::vector<std::size_t>& ranks, std::chrono::milliseconds timeout,
                           const std::string& waitingFor) {
    if (onFailure_) onFailure_();
    agents_.throwIfAnyExited();
    std::string names;
    for (std::size_t rank : ranks) names += (names.empty() ? "" : ", ") + label(rank);
    throw BenchFailure(names + " said nothing for " + std::to_string(timeout.count()) +
                       " ms while the benchmark waited for " + waitingFor);
  }

  Agents agents_;
  std::function<void()> onFailure_;
};

// What the allocated reports of the ranks say, by rank.
struct Allocated {
  std::uint64_t freeBefore = 0;
  std::uint64_t free = 0;
  std::size_t allocations = 0;
};

// One measurement's rounds: the ranks are started, their tensors allocated, the baseline set up and the channel
// open; this runs warm-up and timed rounds, the channel and the baseline taking turns.
class Rounds {
 public:
  Rounds(const GpuBenchConfig& config, GpuRanks& ranks, GpuMeasurement& row, bool ncclTiming)
      : config_(config), ranks_(ranks), row_(row), ncclTiming_(ncclTiming) {}

  // `transfer` and `version` continue across the measurements of one set of ranks.
  void run(std::uint64_t& transfer, std::uint64_t& version, std::ostream& progress) {
    const bool baseline = row_.baselineSkipped.empty();
    std::vector<double> channelMs;
    std::vector<double> senderMs;
    std::vector<double> baselineMs;
    std::vector<double> baselineGpuMs;
    for (std::size_t round = 0; round < config_.warmup + config_.repetitions; ++round) {
      const bool measured = round >= config_.warmup;
      // The channel first in even rounds, the baseline first in odd ones: neither always follows the other.
      std::vector<const char*> paths{kChannelPath};
      if (baseline) paths = round % 2 == 0 ? std::vector{kChannelPath, kRawPath} : std::vector{kRawPath, kChannelPath};
      for (const char* path : paths) {
        throwIfInterrupted();
        const bool channel = std::string_view(path) == kChannelPath;
        // Untimed, before either path alike: a new version, so that a receiver's digest can only match with this
        // transfer's bytes, and the GPUs come to both paths from the same work.
        ++version;
        ranks_.sendAll({{"command", "prepare"}, {"version", version}});
        ranks_.collect("prepared", kPrepareTimeout, "version " + std::to_string(version) + " to be written");
        if (channel) ++transfer;
        const auto start = nanosecondsOf(Clock::now() + kStartLead);
        ranks_.sendAll({{"command", "go"}, {"transfer", channel ? transfer : 0}, {"path", path}, {"start_ns", start}});
        // Longer than the ranks' own deadline, so that a rank that gives up says why before it is called silent.
        const auto done = ranks_.collect(
            "done", kGpuRoundTimeout + kStartLead + kExitNoticeTimeout,
            channel ? "transfer " + std::to_string(transfer) : std::string("a baseline round"));
        account(done, start);
        if (channel) {
          checkDigests(done, version, round == 0);
          if (measured) {
            channelMs.push_back(roundMs(done, start));
            senderMs.push_back(millisecondsBetween(start, signedField(done[0], "end")));
          }
        } else if (measured) {
          baselineMs.push_back(roundMs(done, start));
          baselineGpuMs.push_back(static_cast<double>(unsignedField(done[0], "gpu_ns")) / 1e6);
        }
      }
    }
    row_.channelRound = summarize(std::move(channelMs));
    row_.senderReturn = summarize(std::move(senderMs));
    row_.baselineRound = summarize(std::move(baselineMs));
    row_.baselineGpu = summarize(std::move(baselineGpuMs));
    progress << "    channel " << fixed(row_.channelRound.median, 1) << " ms ("
             << fixed(gigabytesPerSecond(row_.channelRound, row_.modelBytes), 1) << " GB/s)";
    if (baseline) {
      progress << ", baseline " << fixed(row_.baselineRound.median, 1) << " ms ("
               << fixed(gigabytesPerSecond(row_.baselineRound, row_.modelBytes), 1) << " GB/s), ratio "
               << ratio(row_.ratio()).text;
    }
    progress << ", digests equal " << row_.digestsEqual << "/" << row_.digestsCompared << "\n";
  }

  // The version and the sender's digest of the first channel round, for the host check.
  std::uint64_t checkedVersion() const { return checkedVersion_; }
  const bus::Digest& checkedDigest() const { return checkedDigest_; }

 private:
  // nccl: from the common start until the last rank finished (a broadcast done on the root says nothing about the
  // receivers). cuda_ipc: the sender's call (send() returns once every receiver is done).
  double roundMs(const std::vector<RankLine>& done, std::int64_t start) const {
    if (!ncclTiming_) return millisecondsBetween(signedField(done[0], "start"), signedField(done[0], "end"));
    std::int64_t last = start;
    for (const RankLine& line : done) last = std::max(last, signedField(line, "end"));
    return millisecondsBetween(start, last);
  }

  void account(const std::vector<RankLine>& done, std::int64_t start) {
    for (std::size_t rank = 0; rank < done.size(); ++rank) {
      row_.maxLateStartMs = std::max(row_.maxLateStartMs, millisecondsBetween(start, signedField(done[rank], "start")));
      DeviceMemoryUse& use = memoryOf(rank);
      use.minFree = std::min(use.minFree, unsignedField(done[rank], "min_free"));
    }
    // The channel's own memory: the latest figures, summed over the ranks of each device.
    for (DeviceMemoryUse& use : row_.memory) {
      use.channelBuffers = 0;
      use.channelTables = 0;
    }
    for (std::size_t rank = 0; rank < done.size(); ++rank) {
      memoryOf(rank).channelBuffers += unsignedField(done[rank], "buffers");
      memoryOf(rank).channelTables += unsignedField(done[rank], "tables");
    }
  }

  void checkDigests(const std::vector<RankLine>& done, std::uint64_t version, bool first) {
    const RankLine& sender = done[0];
    const bus::Digest sent{unsignedField(sender, "lo"), unsignedField(sender, "hi")};
    const bool senderWhole = unsignedField(sender, "bytes") == row_.modelBytes;
    std::uint32_t handles = 0;
    for (std::size_t rank = 1; rank < done.size(); ++rank) {
      const RankLine& receiver = done[rank];
      ++row_.digestsCompared;
      const bus::Digest got{unsignedField(receiver, "lo"), unsignedField(receiver, "hi")};
      if (senderWhole && got == sent && unsignedField(receiver, "bytes") == row_.modelBytes) ++row_.digestsEqual;
      if (receiver.contains("handles")) handles = std::max(handles, static_cast<std::uint32_t>(unsignedField(receiver, "handles")));
    }
    if (sender.contains("generation")) row_.exportGeneration = unsignedField(sender, "generation");
    if (first) {
      checkedVersion_ = version;
      checkedDigest_ = sent;
      row_.handlesAfterFirst = handles;
    }
    row_.handlesAtEnd = handles;
  }

  DeviceMemoryUse& memoryOf(std::size_t rank) {
    const int device = row_.devices[rank];
    for (DeviceMemoryUse& use : row_.memory) {
      if (use.device == device) return use;
    }
    throw BenchFailure("no memory entry for GPU " + std::to_string(device));
  }

  const GpuBenchConfig& config_;
  GpuRanks& ranks_;
  GpuMeasurement& row_;
  bool ncclTiming_;
  std::uint64_t checkedVersion_ = 0;
  bus::Digest checkedDigest_;
};

// The memory entries of a measurement: one per device its ranks use, named by who is on it.
std::vector<DeviceMemoryUse> memoryEntries(const std::vector<int>& devices) {
  std::vector<DeviceMemoryUse> entries;
  for (std::size_t rank = 0; rank < devices.size(); ++rank) {
    auto found = std::find_if(entries.begin(), entries.end(),
                              [&](const DeviceMemoryUse& use) { return use.device == devices[rank]; });
    if (found == entries.end()) {
      entries.push_back(DeviceMemoryUse{});
      entries.back().device = devices[rank];
      entries.back().minFree = UINT64_MAX;
      found = entries.end() - 1;
    }
    found->side += found->side.empty() ? "" : " + ";
    found->side += rank == 0 ? "sender" : "receiver " + std::to_string(rank);
  }
  return entries;
}

class GpuRun {
 public:
  GpuRun(const GpuBenchConfig& config, const Json& gpus, std::ostream& progress)
      : config_(config), gpus_(gpus), progress_(progress) {}

  // One set of rank processes per model: rank 0 on GPU 0 sends, ranks 1..receivers on GPUs 1..receivers receive;
  // one measurement per bucket size.
  std::vector<GpuMeasurement> nccl(const std::string& model, std::size_t receivers) {
    const bus::Manifest manifest = catalogManifest(model);
    std::vector<int> devices;
    for (std::size_t rank = 0; rank <= receivers; ++rank) devices.push_back(static_cast<int>(rank));
    std::vector<GpuMeasurement> rows;
    for (const std::uint64_t mib : config_.bucketMiB) rows.push_back(emptyRow("nccl", model, manifest, devices, mib));
    progress_ << "nccl " << model << ": " << manifest.size() << " tensors, " << gib(manifest.totalBytes())
              << ", sender on GPU 0, " << receivers << " receiver" << (receivers == 1 ? "" : "s") << "\n";
    if (const std::string tooBig = tooBigFor(manifest, devices); !tooBig.empty()) return skipAll(rows, tooBig);

    GpuRanks ranks;
    std::vector<Allocated> allocated;
    if (const std::string full = startRanks(ranks, "nccl", model, devices, 0, "", allocated); !full.empty()) {
      return skipAll(rows, full);
    }
    for (GpuMeasurement& row : rows) row.senderAllocations = allocated[0].allocations;

    // The raw broadcast's buffer: the whole model where memory allows, else the largest piece that leaves room for
    // the channel's buffers.
    const std::uint64_t largestBucket = *std::max_element(config_.bucketMiB.begin(), config_.bucketMiB.end()) * kMiB;
    std::uint64_t room = UINT64_MAX;
    for (const Allocated& rank : allocated) {
      const std::uint64_t reserved = kBaselineHeadroomBytes + bus::gpu::kNcclDefaultBuffers * largestBucket;
      room = std::min(room, rank.free > reserved ? rank.free - reserved : 0);
    }
    const auto [chunk, skippedWhy] = baselineChunk(manifest.totalBytes(), room, "each GPU");
    for (GpuMeasurement& row : rows) setBaseline(row, chunk, skippedWhy);
    progress_ << "  raw communicator"
              << (chunk > 0 ? ", baseline buffer " + gib(chunk) : ", no baseline: " + skippedWhy) << "\n";
    ranks.sendAll({{"command", "baseline"}, {"bytes", chunk}, {"nccl_id", chunk > 0 ? hexId() : ""}});
    const auto baselined = ranks.collect("baselined", kRankSetupTimeout, "the raw communicator and its buffer");
    for (GpuMeasurement& row : rows) {
      for (std::size_t rank = 0; rank < baselined.size(); ++rank) {
        memoryOf(row, rank).rawCommunicator = unsignedField(baselined[rank], "communicator");
      }
    }

    std::uint64_t transfer = 0;
    std::uint64_t version = 0;
    for (GpuMeasurement& row : rows) {
      progress_ << "  bucket " << row.bucketBytes / kMiB << " MiB: opening the channel\n";
      ranks.sendAll({{"command", "open"}, {"bucket_bytes", row.bucketBytes}, {"nccl_id", hexId()}});
      const auto opened = ranks.collect("opened", kRankSetupTimeout, "the channel to open");
      row.buckets = static_cast<std::uint32_t>(unsignedField(opened[0], "buckets"));
      for (std::size_t rank = 0; rank < opened.size(); ++rank) setFreeBeforeOpen(row, rank, opened[rank]);
      for (std::size_t rank = 0; rank < allocated.size(); ++rank) addTensorBytes(row, rank, allocated[rank]);
      progress_ << "    " << row.buckets << " buckets: " << config_.warmup << " warm-up + " << config_.repetitions
                << " timed rounds\n";
      Rounds rounds(config_, ranks, row, true);
      rounds.run(transfer, version, progress_);
      ranks.sendAll({{"command", "close"}});
      ranks.collect("closed", kRankSetupTimeout, "the channel to close");
      hostCheck(row, manifest, rounds);
    }
    ranks.quit();
    return rows;
  }

  // One sender on the first of --devices, receivers on the second; one measurement per model.
  GpuMeasurement cudaIpc(const std::string& model, std::size_t receivers) {
    const bus::Manifest manifest = catalogManifest(model);
    const int senderDevice = config_.ipcDevices[0];
    const int receiverDevice = config_.ipcDevices[1];
    std::vector<int> devices{senderDevice};
    devices.insert(devices.end(), receivers, receiverDevice);
    GpuMeasurement row = emptyRow("cuda_ipc", model, manifest, devices, config_.bucketMiB.front());
    progress_ << "cuda_ipc " << model << ": " << manifest.size() << " tensors, " << gib(manifest.totalBytes())
              << ", sender on GPU " << senderDevice << ", " << receivers << " receiver" << (receivers == 1 ? "" : "s")
              << " on GPU " << receiverDevice << "\n";
    if (const std::string tooBig = tooBigFor(manifest, devices); !tooBig.empty()) {
      row.skipped = tooBig;
      progress_ << "  skipped: " << tooBig << "\n";
      return row;
    }

    bus::gpu::IpcGeometry geometry;
    geometry.maxReceivers = static_cast<std::uint32_t>(receivers);
    const auto tensorCount = static_cast<std::uint32_t>(manifest.size());
    geometry.maxAllocations = std::max(geometry.maxAllocations, tensorCount);  // at most one per tensor
    geometry.maxTensors = std::max(geometry.maxTensors, tensorCount);
    const std::string name = "wsync-bench-" + std::to_string(::getpid()) + "-ipc-" + std::to_string(segments_++);
    auto segment = bus::gpu::CudaIpcSegment::create(name, geometry);
    if (!segment) throw BenchFailure("cuda_ipc segment: " + segment.error().describe());

    GpuRanks ranks;
    std::uint64_t transfer = 0;
    // A rank that dies or goes silent: whoever waits on it in the segment gives up at once.
    ranks.onFailure([&segment, &transfer] { (*segment)->abort(transfer); });
    std::vector<Allocated> allocated;
    if (const std::string full = startRanks(ranks, "cuda_ipc", model, devices, receiverDevice, name, allocated);
        !full.empty()) {
      row.skipped = full;
      return row;
    }
    row.senderAllocations = allocated[0].allocations;

    // The copy's two buffers: on one GPU both come out of its free memory; across two, one from each. Ranks start
    // one by one, so the last one on a GPU saw what all the others took there.
    const std::uint64_t receiverSideFree = allocated.back().free;
    const std::uint64_t headroom = kBaselineHeadroomBytes;
    std::uint64_t room = 0;
    if (senderDevice == receiverDevice) {
      room = receiverSideFree > headroom ? (receiverSideFree - headroom) / 2 : 0;
    } else {
      room = std::min(allocated.front().free, receiverSideFree);
      room = room > headroom ? room - headroom : 0;
    }
    const auto [chunk, skippedWhy] = baselineChunk(manifest.totalBytes(), room, "the GPUs");
    setBaseline(row, chunk, skippedWhy);
    for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
      ranks.send(rank, {{"command", "baseline"}, {"bytes", rank == 0 ? chunk : 0}});
    }
    ranks.collect("baselined", kRankSetupTimeout, "the baseline's buffers");

    // One at a time, so that each rank's free memory before its open includes the others' opens.
    for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
      ranks.send(rank, {{"command", "open"}, {"bucket_bytes", row.bucketBytes}});
      setFreeBeforeOpen(row, rank, ranks.expect(rank, "opened", kRankSetupTimeout, "the channel to open"));
      addTensorBytes(row, rank, allocated[rank]);
    }
    progress_ << "  " << config_.warmup << " warm-up + " << config_.repetitions << " timed rounds"
              << (chunk > 0 ? ", baseline buffers " + gib(chunk) : ", no baseline: " + skippedWhy) << "\n";
    std::uint64_t version = 0;
    Rounds rounds(config_, ranks, row, false);
    rounds.run(transfer, version, progress_);
    ranks.sendAll({{"command", "close"}});
    ranks.collect("closed", kRankSetupTimeout, "the channel to close");
    hostCheck(row, manifest, rounds);
    ranks.quit();
    return row;
  }

 private:
  GpuMeasurement emptyRow(const std::string& channel, const std::string& model, const bus::Manifest& manifest,
                          const std::vector<int>& devices, std::uint64_t bucketMiB) const {
    GpuMeasurement row;
    row.channel = channel;
    row.model = model;
    row.tensors = manifest.size();
    row.modelBytes = manifest.totalBytes();
    row.bucketBytes = bucketMiB * kMiB;
    row.receivers = devices.size() - 1;
    row.devices = devices;
    row.allocation = config_.allocation;
    row.memory = memoryEntries(devices);
    row.hostCheck = config_.hostCheck ? "not run" : "off";
    return row;
  }

  std::vector<GpuMeasurement> skipAll(std::vector<GpuMeasurement>& rows, const std::string& why) {
    progress_ << "  skipped: " << why << "\n";
    for (GpuMeasurement& row : rows) row.skipped = why;
    return rows;
  }

  // Empty when every device could hold the tensors of the ranks on it; else why not.
  std::string tooBigFor(const bus::Manifest& manifest, const std::vector<int>& devices) const {
    std::map<int, std::uint64_t> needed;
    for (const int device : devices) needed[device] += manifest.totalBytes();
    for (const auto& [device, bytes] : needed) {
      const auto has = gpus_.at("devices").at(static_cast<std::size_t>(device)).at("memory_bytes").get<std::uint64_t>();
      if (bytes > has) {
        return "the tensors of the ranks on GPU " + std::to_string(device) + " need " + gib(bytes) + ", it has " +
               gib(has);
      }
    }
    return {};
  }

  // Starts the ranks one after the other (each allocates with the machine to itself, and its free memory before
  // and after says what its tensors took). Empty when all have their tensors, else why not (nomemory).
  std::string startRanks(GpuRanks& ranks, const std::string& channel, const std::string& model,
                         const std::vector<int>& devices, int baselineDevice, const std::string& segment,
                         std::vector<Allocated>& allocated) {
    const auto started = Clock::now();
    for (std::size_t rank = 0; rank < devices.size(); ++rank) {
      const std::string label = "rank " + std::to_string(rank) + " (" + (rank == 0 ? "sender" : "receiver") +
                                ", GPU " + std::to_string(devices[rank]) + ")";
      ranks.start(label, GpuRankOptions{channel, static_cast<std::uint32_t>(rank),
                                        static_cast<std::uint32_t>(devices.size()), devices[rank], baselineDevice,
                                        model, config_.allocation, segment});
      const RankLine line = ranks.next(rank, kRankStartTimeout, "its tensors to be allocated");
      if (word(line) == "nomemory") {
        const std::string why = label + ": " + line.value("why", "");
        progress_ << "  skipped: " << why << "\n";
        ranks.quit();
        return why;
      }
      if (word(line) != "allocated") throw BenchFailure(label + " said " + line.dump() + " on start");
      allocated.push_back(Allocated{unsignedField(line, "free_before"), unsignedField(line, "free"), unsignedField(line, "allocations")});
    }
    progress_ << "  " << devices.size() << " ranks started, tensors allocated ("
              << fixed(std::chrono::duration<double>(Clock::now() - started).count(), 1) << " s)\n";
    return {};
  }

  // The baseline's buffer size (the model, or pieces of it when `room` is short) and, when there can be none, why.
  std::pair<std::uint64_t, std::string> baselineChunk(std::uint64_t modelBytes, std::uint64_t room,
                                                      const std::string& where) const {
    if (room >= modelBytes) return {modelBytes, {}};
    const std::uint64_t chunk = room / kBaselineChunkGranule * kBaselineChunkGranule;
    if (chunk < kMinBaselineChunkBytes) {
      return {0, "after the tensors, " + where + " had room for " + gib(room) + " of baseline buffers, less than " +
                     gib(kMinBaselineChunkBytes) + " (GPU memory)"};
    }
    return {chunk, {}};
  }

  static void setBaseline(GpuMeasurement& row, std::uint64_t chunk, const std::string& skippedWhy) {
    row.baselineChunkBytes = chunk;
    row.baselineCalls = chunk > 0 ? (row.modelBytes + chunk - 1) / chunk : 0;
    row.baselineSkipped = skippedWhy;
  }

  static DeviceMemoryUse& memoryOf(GpuMeasurement& row, std::size_t rank) {
    for (DeviceMemoryUse& use : row.memory) {
      if (use.device == row.devices[rank]) return use;
    }
    throw BenchFailure("no memory entry for rank " + std::to_string(rank));
  }

  // The device's free memory before the channel: the first rank on it to open says it (the others open later).
  static void setFreeBeforeOpen(GpuMeasurement& row, std::size_t rank, const RankLine& opened) {
    DeviceMemoryUse& use = memoryOf(row, rank);
    if (use.freeBeforeOpen == 0) use.freeBeforeOpen = unsignedField(opened, "free_before");
    use.minFree = std::min(use.minFree, unsignedField(opened, "free_after"));
  }

  static void addTensorBytes(GpuMeasurement& row, std::size_t rank, const Allocated& allocated) {
    const std::uint64_t taken = allocated.freeBefore > allocated.free ? allocated.freeBefore - allocated.free : 0;
    memoryOf(row, rank).tensorBytes += taken;
  }

  void hostCheck(GpuMeasurement& row, const bus::Manifest& manifest, const Rounds& rounds) {
    if (!config_.hostCheck) return;
    const auto started = Clock::now();
    const bus::Digest expected = expectedDeviceDigest(manifest, kGpuContentSeed, rounds.checkedVersion());
    row.hostCheck = expected == rounds.checkedDigest() ? "equal" : "differs";
    progress_ << "    host check of version " << rounds.checkedVersion() << ": " << row.hostCheck << " ("
              << fixed(std::chrono::duration<double>(Clock::now() - started).count(), 1) << " s)\n";
  }

  const GpuBenchConfig& config_;
  const Json& gpus_;
  std::ostream& progress_;
  std::size_t segments_ = 0;
};

}  // namespace

GpuResults measureGpus(const GpuBenchConfig& config, const Json& gpus, std::ostream& progress) {
  const int deviceCount = gpus.at("visible").get<int>();
  if (deviceCount == 0) throw BenchFailure("no GPU: " + gpus.at("no_device_reason").get<std::string>());
  GpuResults results;
  GpuRun run(config, gpus, progress);
  for (const std::string& channel : config.channels) {
    if (channel == "nccl") {
      if (deviceCount < 2) {
        const std::string why = "nccl needs 2 GPUs (NCCL puts one rank on each), this process sees " +
                                std::to_string(deviceCount);
        if (config.channelsGiven) throw BenchFailure(why);
        results.notes.push_back("nccl not measured: " + why);
        progress << "nccl: skipped, " << why << "\n";
        continue;
      }
      const std::size_t receivers =
          config.receivers > 0 ? config.receivers : static_cast<std::size_t>(deviceCount - 1);
      if (receivers + 1 > static_cast<std::size_t>(deviceCount)) {
        throw BenchFailure("nccl with " + std::to_string(receivers) + " receivers needs " +
                           std::to_string(receivers + 1) + " GPUs, this process sees " +
                           std::to_string(deviceCount));
      }
      for (const std::string& model : config.models) {
        for (GpuMeasurement& row : run.nccl(model, receivers)) results.nccl.push_back(std::move(row));
      }
    } else if (channel == "cuda_ipc") {
      for (const int device : config.ipcDevices) {
        if (device < 0 || device >= deviceCount) {
          throw BenchFailure("cuda_ipc: GPU " + std::to_string(device) + " is not visible (this process sees " +
                             std::to_string(deviceCount) + ")");
        }
      }
      const std::size_t receivers = config.receivers > 0 ? config.receivers : 1;
      for (const std::string& model : config.models) results.cudaIpc.push_back(run.cudaIpc(model, receivers));
    } else {
      throw BenchFailure("unknown channel '" + channel + "'");
    }
  }
  return results;
}

}  // namespace wsync::bench
