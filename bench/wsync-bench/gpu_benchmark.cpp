#include "gpu.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>

#include <wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp>
#include <wsync/bus/channel/gpu/gpu_runtime.hpp>
#include <wsync/bus/channel/nccl/nccl_channel.hpp>

#include "agents.hpp"
#include "gpu_rank_protocol.hpp"
#include "tensor_memory.hpp"

namespace wsync::bench {
namespace {

// A rank's exit status is looked for this often after its socket closed.
constexpr std::chrono::milliseconds kExitPollInterval{10};
// Where an MPS daemon listens unless CUDA_MPS_PIPE_DIRECTORY says otherwise.
constexpr const char* kDefaultMpsPipeDirectory = "/tmp/nvidia-mps";

// The directory of a running MPS daemon's control pipe that this process's CUDA would use; empty without one.
std::string mpsPipeDirectory() {
  const char* chosen = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string directory = chosen != nullptr && *chosen != '\0' ? chosen : kDefaultMpsPipeDirectory;
  return ::access((directory + "/control").c_str(), F_OK) == 0 ? directory : std::string();
}

double millisecondsBetween(std::int64_t startNs, std::int64_t endNs) {
  return static_cast<double>(endNs - startNs) / 1e6;
}

std::string hexId() { return bus::gpu::toHex(orThrow(bus::gpu::makeNcclUniqueId(), "NCCL unique id")); }

// The rank processes of one measurement and the sockets they take commands on and report through.
class GpuRanks {
 public:
  void start(const std::string& label, const GpuRankOptions& options) {
    agents_.start(label, "agent-gpu-rank", options, true);
  }
  std::size_t size() const { return agents_.size(); }

  // Called before a dead or silent rank is reported (cuda_ipc: the segment's abort, so that the others give up).
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

  // The next report of every rank (of `only`), read as they come, so that a rank dying meanwhile is named at once.
  std::vector<RankLine> collect(const std::string& word, std::chrono::milliseconds timeout,
                                const std::string& waitingFor, std::optional<std::size_t> only = std::nullopt) {
    std::vector<std::optional<RankLine>> lines(size());
    for (std::size_t rank = 0; rank < size(); ++rank) {
      if (only && rank != *only) lines[rank] = RankLine::object();  // not waited for
    }
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::string quiet;
      for (std::size_t rank = 0; rank < size(); ++rank) {
        if (lines[rank]) continue;
        if (auto line = agents_.pipe(rank).readLine(kCollectSlice)) {
          lines[rank] = parseRankLine(*line, agents_.label(rank));
          if (!word.empty() && bench::word(*lines[rank]) != word) {
            throw BenchFailure(agents_.label(rank) + " said " + *line + " while the benchmark waited for " +
                               waitingFor);
          }
          continue;
        }
        if (agents_.pipe(rank).ended()) failed(rank, waitingFor);
        quiet += (quiet.empty() ? "" : ", ") + agents_.label(rank);
      }
      if (quiet.empty()) break;
      if (agents_.anyExited()) failed(only.value_or(0), waitingFor);
      if (Clock::now() > deadline) {
        if (onFailure_) onFailure_();
        agents_.throwIfAnyExited();
        throw BenchFailure(quiet + " said nothing for " + std::to_string(timeout.count()) +
                           " ms while the benchmark waited for " + waitingFor);
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
  [[noreturn]] void failed(std::size_t rank, const std::string& waitingFor) {
    if (onFailure_) onFailure_();
    throwIfInterrupted();
    const auto until = Clock::now() + kExitNoticeTimeout;
    while (!agents_.anyExited() && Clock::now() < until) std::this_thread::sleep_for(kExitPollInterval);
    agents_.throwIfAnyExited();
    throw BenchFailure(agents_.label(rank) + " closed its socket while the benchmark waited for " + waitingFor);
  }

  Agents agents_;
  std::function<void()> onFailure_;
};

struct Allocated {
  std::uint64_t freeBefore = 0;
  std::uint64_t free = 0;
  std::size_t allocations = 0;
};

DeviceMemoryUse& memoryOf(GpuMeasurement& row, std::size_t rank) {
  for (DeviceMemoryUse& use : row.memory) {
    if (use.device == row.devices[rank]) return use;
  }
  throw BenchFailure("no memory entry for rank " + std::to_string(rank));
}

class GpuRun {
 public:
  GpuRun(const GpuBenchConfig& config, std::ostream& progress) : config_(config), progress_(progress) {}

  // One set of ranks on `devices`, rank 0 sending. nccl: a measurement per bucket size; cuda_ipc: one.
  std::vector<GpuMeasurement> measure(bool nccl, const std::string& model, const std::vector<int>& devices) {
    const bus::Manifest manifest = catalogManifest(model);
    // One memory entry per device the ranks use, named by who is on it.
    std::vector<DeviceMemoryUse> memory;
    for (std::size_t rank = 0; rank < devices.size(); ++rank) {
      auto use = std::find_if(memory.begin(), memory.end(), [&](auto& u) { return u.device == devices[rank]; });
      if (use == memory.end()) use = memory.insert(use, {.device = devices[rank], .minFree = UINT64_MAX});
      use->side += (use->side.empty() ? "" : " + ") + (rank == 0 ? "sender" : "receiver " + std::to_string(rank));
      ++use->sides;
    }
    std::vector<GpuMeasurement> rows;
    for (const std::uint64_t bucketMiB : config_.bucketMiB) {
      rows.push_back({.channel = nccl ? "nccl" : "cuda_ipc",
                      .model = model,
                      .tensors = manifest.size(),
                      .modelBytes = manifest.totalBytes(),
                      .bucketBytes = bucketMiB * kMiB,
                      .devices = devices,
                      .memory = memory});
      if (!nccl) break;
    }
    progress_ << rows[0].channel << " " << model << ": " << manifest.size() << " tensors, "
              << gib(manifest.totalBytes()) << ", sender on GPU " << devices[0] << ", " << devices.size() - 1
              << " receiver(s)\n";
    std::unique_ptr<bus::gpu::CudaIpcSegment> segment;
    std::uint64_t transfer = 0;
    GpuRanks ranks;
    const std::string name = "wsync-bench-" + std::to_string(::getpid()) + "-ipc-" + std::to_string(segments_++);
    if (!nccl) {
      bus::gpu::IpcGeometry geometry;
      geometry.maxReceivers = static_cast<std::uint32_t>(devices.size() - 1);
      const auto tensorCount = static_cast<std::uint32_t>(manifest.size());
      geometry.maxAllocations = std::max(geometry.maxAllocations, tensorCount);  // at most one per tensor
      geometry.maxTensors = std::max(geometry.maxTensors, tensorCount);
      segment = orThrow(bus::gpu::CudaIpcSegment::create(name, geometry), "cuda_ipc segment");
      // A rank that dies or goes silent: whoever waits on it in the segment gives up at once.
      ranks.onFailure([&segment, &transfer] { segment->abort(transfer); });
    }
    std::vector<Allocated> allocated;
    // A device too small for its ranks' tensors: the rank that cannot allocate says so (nomemory).
    const std::string skipped =
        startRanks(ranks, rows[0].channel, model, devices, devices.back(), nccl ? "" : name, allocated);
    if (!skipped.empty()) {
      for (GpuMeasurement& row : rows) row.skipped = skipped;
      return rows;
    }
    // nccl: a bucket size whose buffers do not fit beside the tensors is skipped, saying so, before it could fail a
    // rank's allocation mid-run (qwen3-30b-a3b's 18,867 tensors leave an H100 too little for 2 x 4 GiB).
    std::uint64_t largestBucket = 0;
    if (nccl) {
      std::uint64_t leastFree = UINT64_MAX;
      for (const Allocated& rank : allocated) leastFree = std::min(leastFree, rank.free);
      for (GpuMeasurement& row : rows) {
        const std::uint64_t needed = kBaselineHeadroomBytes + bus::gpu::kNcclDefaultBuffers * row.bucketBytes;
        if (leastFree >= needed) {
          largestBucket = std::max(largestBucket, row.bucketBytes);
          continue;
        }
        row.skipped = "GPU memory: after the tensors a GPU had " + gib(leastFree) + " free, less than the channel's " +
                      std::to_string(bus::gpu::kNcclDefaultBuffers) + " buffers of " + gib(row.bucketBytes) + " and " +
                      gib(kBaselineHeadroomBytes) + " for communicators and CUDA";
        progress_ << "  " << row.bucketBytes / kMiB << " MiB buckets: skipped: " << row.skipped << "\n";
      }
      if (largestBucket == 0) {
        ranks.quit();
        return rows;
      }
    }
    // The baseline's buffers: the model where memory allows, else the largest piece. nccl: one per GPU, room left for
    // the buckets; cuda_ipc: two, out of one GPU's free memory or one on each (the last rank saw what others took).
    std::uint64_t room = UINT64_MAX;
    if (nccl) {
      const std::uint64_t reserved = kBaselineHeadroomBytes + bus::gpu::kNcclDefaultBuffers * largestBucket;
      for (const Allocated& rank : allocated) room = std::min(room, rank.free > reserved ? rank.free - reserved : 0);
    } else {
      const std::uint64_t free = std::min(allocated.front().free, allocated.back().free);
      const std::uint64_t buffers = devices.front() == devices.back() ? 2 : 1;
      room = free > kBaselineHeadroomBytes ? (free - kBaselineHeadroomBytes) / buffers : 0;
    }
    for (GpuMeasurement& row : rows) setBaseline(row, room, nccl ? "each GPU" : "the GPUs", allocated[0]);
    const std::uint64_t chunk = rows[0].baselineChunkBytes;
    const std::string rawId = nccl && chunk > 0 ? hexId() : "";
    for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
      ranks.send(rank, {{"command", "baseline"}, {"bytes", nccl || rank == 0 ? chunk : 0}, {"nccl_id", rawId}});
    }
    const auto baselined = ranks.collect("baselined", kRankSetupTimeout, "the baselines' buffers");
    std::uint64_t version = 0;
    for (GpuMeasurement& row : rows) {
      if (!row.skipped.empty()) continue;
      for (std::size_t rank = 0; rank < baselined.size(); ++rank) {
        memoryOf(row, rank).rawCommunicator = unsignedField(baselined[rank], "communicator");
      }
      // nccl: every rank at once (the communicator forms); cuda_ipc: one by one, each seeing the others' opens.
      std::vector<RankLine> opened;
      const RankLine open{{"command", "open"}, {"bucket_bytes", row.bucketBytes}, {"nccl_id", nccl ? hexId() : ""}};
      if (nccl) {
        ranks.sendAll(open);
        opened = ranks.collect("opened", kRankSetupTimeout, "the channel to open");
      }
      for (std::size_t rank = 0; !nccl && rank < ranks.size(); ++rank) {
        ranks.send(rank, open);
        opened.push_back(ranks.collect("opened", kRankSetupTimeout, "the channel to open", rank)[rank]);
      }
      row.buckets = static_cast<std::uint32_t>(unsignedField(opened[0], "buckets"));
      for (std::size_t rank = 0; rank < opened.size(); ++rank) opening(row, rank, opened[rank], allocated[rank]);
      runRounds(ranks, row, nccl, transfer, version);
    }
    ranks.quit();
    return rows;
  }

 private:
  // One after the other, each allocating with the machine to itself. Empty when all have their tensors, else why.
  std::string startRanks(GpuRanks& ranks, const std::string& channel, const std::string& model,
                         const std::vector<int>& devices, int baselineDevice, const std::string& segment,
                         std::vector<Allocated>& allocated) {
    for (std::size_t rank = 0; rank < devices.size(); ++rank) {
      const std::string label = "rank " + std::to_string(rank) + " (" + (rank == 0 ? "sender" : "receiver") + ", GPU " +
                                std::to_string(devices[rank]) + ")";
      ranks.start(label, GpuRankOptions{channel,
                                        static_cast<std::uint32_t>(rank),
                                        static_cast<std::uint32_t>(devices.size()),
                                        devices[rank],
                                        baselineDevice,
                                        model,
                                        config_.allocation,
                                        segment,
                                        channel == "nccl" && config_.ncclNetwork,
                                        config_.allocationsKept,
                                        config_.ncclFirstSliceMiB << 20,
                                        config_.ncclCopyBlocks,
                                        config_.timeline,
                                        config_.ncclMaxCtas,
                                        config_.ncclPollMicroseconds,
                                        config_.ipcSpinMicroseconds,
                                        config_.layoutKept,
                                        config_.ncclBuffers,
                                        config_.ncclMaxSliceMiB << 20,
                                        config_.ncclEnqueue,
                                        config_.ncclRampCopyBlocks});
      const RankLine line = ranks.collect("", kRankStartTimeout, "its tensors to be allocated", rank)[rank];
      if (word(line) == "nomemory") {
        const std::string why = label + ": " + line.value("why", "");
        progress_ << "  skipped: " << why << "\n";
        ranks.quit();
        return why;
      }
      if (word(line) != "allocated") throw BenchFailure(label + " said " + line.dump() + " on start");
      allocated.push_back(Allocated{unsignedField(line, "free_before"), unsignedField(line, "free"),
                                    unsignedField(line, "allocations")});
    }
    return {};
  }

  // The baseline's buffer: the model, or pieces of it when `room` is short; none (and why) below the smallest piece.
  void setBaseline(GpuMeasurement& row, std::uint64_t room, const std::string& where, const Allocated& sender) {
    row.senderAllocations = sender.allocations;
    row.baselineChunkBytes =
        room >= row.modelBytes ? row.modelBytes : room / kBaselineChunkGranule * kBaselineChunkGranule;
    if (row.baselineChunkBytes < kMinBaselineChunkBytes && row.baselineChunkBytes < row.modelBytes) {
      row.baselineChunkBytes = 0;
      row.baselineSkipped = "after the tensors, " + where + " had room for " + gib(room) +
                            " of baseline buffers, less than " + gib(kMinBaselineChunkBytes) + " (GPU memory)";
    }
    row.baselineCalls =
        row.baselineChunkBytes > 0 ? (row.modelBytes + row.baselineChunkBytes - 1) / row.baselineChunkBytes : 0;
  }

  // A rank's `opened` report: free memory before the channel (the first rank on a device to open), tensors' share.
  static void opening(GpuMeasurement& row, std::size_t rank, const RankLine& opened, const Allocated& allocated) {
    DeviceMemoryUse& use = memoryOf(row, rank);
    if (use.freeBeforeOpen == 0) use.freeBeforeOpen = unsignedField(opened, "free_before");
    use.minFree = std::min(use.minFree, unsignedField(opened, "free_after"));
    use.tensorBytes += allocated.freeBefore > allocated.free ? allocated.freeBefore - allocated.free : 0;
  }

  // Warm-up and timed rounds, channel and baseline taking turns, then the channel closed.
  void runRounds(GpuRanks& ranks, GpuMeasurement& row, bool ncclTiming, std::uint64_t& transfer,
                 std::uint64_t& version) {
    progress_ << "  " << row.bucketBytes / kMiB << " MiB buckets: " << config_.warmup << " warm-up + "
              << config_.repetitions << " timed rounds"
              << (row.baselineSkipped.empty() ? ", baseline buffer " + gib(row.baselineChunkBytes)
                                              : ", no baseline: " + row.baselineSkipped)
              << "\n";
    std::vector<double> channelMs, senderMs, baselineMs, baselineGpuMs;
    std::vector<double> channelEngineMs, baselineEngineMs, channelStepMs, baselineStepMs;
    for (std::size_t round = 0; round < config_.warmup + config_.repetitions; ++round) {
      const bool measured = round >= config_.warmup;
      std::vector<const char*> paths{kChannelPath};
      if (row.baselineSkipped.empty()) paths.insert(round % 2 == 0 ? paths.end() : paths.begin(), kRawPath);
      for (const char* path : paths) {
        throwIfInterrupted();
        const bool channel = std::string_view(path) == kChannelPath;
        // Untimed, before either path: a new version, so that a digest can only match this transfer's bytes.
        ranks.sendAll({{"command", "prepare"}, {"version", ++version}});
        ranks.collect("prepared", kPrepareTimeout, "version " + std::to_string(version) + " to be written");
        if (channel) ++transfer;
        const auto start = nanosecondsOf(Clock::now() + kStartLead);
        ranks.sendAll({{"command", "go"}, {"transfer", channel ? transfer : 0}, {"path", path}, {"start_ns", start}});
        // Longer than the ranks' own deadline, so that a rank that gives up says why before it is called silent.
        const auto done = ranks.collect("done", kGpuRoundTimeout + kStartLead + kExitNoticeTimeout,
                                        channel ? "transfer " + std::to_string(transfer) : "a baseline round");
        // nccl: until the last rank returned (the root can finish a broadcast before the receivers); cuda_ipc: send().
        std::int64_t last = start;
        for (const RankLine& line : done) last = std::max(last, signedField(line, "end"));
        const double roundMs = ncclTiming
                                   ? millisecondsBetween(start, last)
                                   : millisecondsBetween(signedField(done[0], "start"), signedField(done[0], "end"));
        account(row, done, start);
        // cuda_ipc: the engine's next step, after either path (gpu_rank_protocol.hpp's "step").
        const std::optional<EngineStep> engine =
            ncclTiming ? std::nullopt : std::optional(engineStep(ranks, done, channel));
        if (engine && measured) {
          (channel ? channelEngineMs : baselineEngineMs).push_back(engine->readyMs);
          (channel ? channelStepMs : baselineStepMs).push_back(engine->stepMs);
        }
        if (channel) {
          checkDigests(row, done, round == 0);
          if (round == 0) row.firstRoundMs = roundMs;
          if (!measured) continue;
          channelMs.push_back(roundMs);
          senderMs.push_back(millisecondsBetween(start, signedField(done[0], "end")));
          if (ncclTiming && config_.timeline) keepTimelines(row, done);
          if (!ncclTiming && config_.timeline) keepIpcStages(row, done);
        } else if (measured) {
          baselineMs.push_back(roundMs);
          baselineGpuMs.push_back(static_cast<double>(unsignedField(done[0], "gpu_ns")) / 1e6);
          for (std::size_t rank = 0; ncclTiming && config_.timeline && rank < done.size(); ++rank) {
            row.rawGpuMs.resize(done.size());
            row.rawCallMs.resize(done.size());
            row.rawGpuMs[rank].push_back(static_cast<double>(unsignedField(done[rank], "gpu_ns")) / 1e6);
            row.rawCallMs[rank].push_back(
                millisecondsBetween(signedField(done[rank], "start"), signedField(done[rank], "end")));
          }
        }
      }
    }
    row.channelRound = summarize(std::move(channelMs));
    row.senderReturn = summarize(std::move(senderMs));
    row.baselineRound = summarize(std::move(baselineMs));
    row.baselineGpu = summarize(std::move(baselineGpuMs));
    row.channelToEngine = summarize(std::move(channelEngineMs));
    row.baselineToEngine = summarize(std::move(baselineEngineMs));
    row.channelStep = summarize(std::move(channelStepMs));
    row.baselineStep = summarize(std::move(baselineStepMs));
    ranks.sendAll({{"command", "close"}});
    ranks.collect("closed", kRankSetupTimeout, "the channel to close");
    progress_ << "    channel " << fixed(row.channelRound.median, 1) << " ms, baseline "
              << fixed(row.baselineRound.median, 1) << " ms, digests equal " << row.digestsEqual << "/"
              << row.digestsCompared << "\n";
  }

  // --timeline: every rank's slices of a timed round, summarised; the last round's kept whole.
  static void keepTimelines(GpuMeasurement& row, const std::vector<RankLine>& done) {
    row.timelines.resize(done.size());
    row.channelCallMs.resize(done.size());
    row.lastSlices = Json::array();
    row.lastHostTimings = Json::array();
    for (std::size_t rank = 0; rank < done.size(); ++rank) {
      row.channelCallMs[rank].push_back(
          millisecondsBetween(signedField(done[rank], "start"), signedField(done[rank], "end")));
      const RankLine& slices = done[rank].at("timeline");
      std::vector<bus::NcclSliceTiming> timeline;
      for (const RankLine& slice : slices) {
        timeline.push_back({.bucket = slice.at(0).get<std::uint32_t>(),
                            .bytes = slice.at(1).get<std::uint64_t>(),
                            .direct = slice.at(2).get<bool>(),
                            .broadcastBegin = slice.at(3).get<double>(),
                            .broadcastEnd = slice.at(4).get<double>(),
                            .copyBegin = slice.at(5).get<double>(),
                            .copyEnd = slice.at(6).get<double>(),
                            .callMs = slice.at(7).get<double>(),
                            .settleMs = slice.at(8).get<double>()});
      }
      row.timelines[rank].push_back(bus::summarizeTimeline(timeline));
      row.lastSlices.push_back(Json::parse(slices.dump()));
      row.lastHostTimings.push_back(Json::parse(done[rank].at("host_timing").dump()));
    }
  }

  // --timeline, cuda_ipc: the round's stages from the sender's and the receivers' instants (one host clock). Where
  // receivers are several, each stage of theirs is the slowest one's.
  static void keepIpcStages(GpuMeasurement& row, const std::vector<RankLine>& done) {
    const RankLine& sender = done[0].at("ipc_timing");
    const auto at = [](const RankLine& timing, const char* key) { return timing.at(key).get<std::int64_t>(); };
    std::int64_t sawPublished = 0, launched = 0, copied = 0, reported = 0;
    double copyGpuMs = 0;
    for (std::size_t rank = 1; rank < done.size(); ++rank) {
      const RankLine& receiver = done[rank].at("ipc_timing");
      sawPublished = std::max(sawPublished, at(receiver, "saw_published"));
      launched = std::max(launched, at(receiver, "launched"));
      copied = std::max(copied, at(receiver, "copied"));
      reported = std::max(reported, at(receiver, "reported"));
      copyGpuMs = std::max(copyGpuMs, receiver.at("copy_gpu_ms").get<double>());
    }
    const std::vector<std::pair<const char*, double>> stages{
        {"sender: span check", millisecondsBetween(at(sender, "send_called"), at(sender, "export_checked"))},
        {"sender: publish", millisecondsBetween(at(sender, "export_checked"), at(sender, "published"))},
        {"hand-off to receiver", millisecondsBetween(at(sender, "published"), sawPublished)},
        {"receiver: tables and launch", millisecondsBetween(sawPublished, launched)},
        {"receiver: copy (host)", millisecondsBetween(launched, copied)},
        {"receiver: copy kernel (GPU)", copyGpuMs},
        {"receiver: digest and report", millisecondsBetween(copied, reported)},
        {"hand-off to sender", millisecondsBetween(reported, at(sender, "all_copied"))},
        {"send, in all", millisecondsBetween(at(sender, "send_called"), at(sender, "all_copied"))}};
    if (row.ipcStages.empty()) {
      for (const auto& [name, ms] : stages) row.ipcStages.emplace_back(name, std::vector<double>{});
    }
    for (std::size_t stage = 0; stage < stages.size(); ++stage)
      row.ipcStages[stage].second.push_back(stages[stage].second);
  }

  // cuda_ipc, after a round of either path: every receiver runs the engine's next step (one kernel of its own).
  // Ready: from the sender's start until the last receiver saw its step done; the channel's receivers step once
  // their receive returned, the baseline's once the sender's copy was seen done (they only learn of it then).
  struct EngineStep {
    double readyMs = 0;
    double stepMs = 0;  // the slowest receiver's step alone, launch to seen done
  };
  static EngineStep engineStep(GpuRanks& ranks, const std::vector<RankLine>& done, bool channel) {
    ranks.sendAll({{"command", "step"}});
    const auto stepped = ranks.collect("stepped", kGpuRoundTimeout, "the receivers' next step");
    const std::int64_t start = signedField(done[0], "start");
    EngineStep result;
    for (std::size_t rank = 1; rank < stepped.size(); ++rank) {
      const double stepMs = static_cast<double>(signedField(stepped[rank], "step_ns")) / 1e6;
      const std::int64_t ready = signedField(done[channel ? rank : 0], "end");
      result.stepMs = std::max(result.stepMs, stepMs);
      result.readyMs = std::max(result.readyMs, millisecondsBetween(start, ready) + stepMs);
    }
    return result;
  }

  // Late starts; per device the least free memory and the channel's own (summed over its ranks).
  static void account(GpuMeasurement& row, const std::vector<RankLine>& done, std::int64_t start) {
    for (DeviceMemoryUse& use : row.memory) use.channelBuffers = use.channelTables = 0;
    for (std::size_t rank = 0; rank < done.size(); ++rank) {
      row.maxLateStartMs = std::max(row.maxLateStartMs, millisecondsBetween(start, signedField(done[rank], "start")));
      DeviceMemoryUse& use = memoryOf(row, rank);
      use.minFree = std::min(use.minFree, unsignedField(done[rank], "min_free"));
      use.channelBuffers += unsignedField(done[rank], "buffers");
      use.channelTables += unsignedField(done[rank], "tables");
    }
  }

  // Every receiver's digest and byte count against the sender's; cuda_ipc's handles and export generation.
  static void checkDigests(GpuMeasurement& row, const std::vector<RankLine>& done, bool first) {
    const RankLine& sender = done[0];
    const bus::Digest sent{unsignedField(sender, "lo"), unsignedField(sender, "hi")};
    const bool senderWhole = unsignedField(sender, "bytes") == row.modelBytes;
    std::uint32_t handles = 0;
    for (std::size_t rank = 1; rank < done.size(); ++rank) {
      const RankLine& receiver = done[rank];
      ++row.digestsCompared;
      const bus::Digest got{unsignedField(receiver, "lo"), unsignedField(receiver, "hi")};
      if (senderWhole && got == sent && unsignedField(receiver, "bytes") == row.modelBytes) ++row.digestsEqual;
      if (receiver.contains("handles")) {
        handles = std::max(handles, static_cast<std::uint32_t>(unsignedField(receiver, "handles")));
      }
    }
    if (sender.contains("generation")) row.exportGeneration = unsignedField(sender, "generation");
    if (first) row.handlesAfterFirst = handles;
    row.handlesAtEnd = handles;
  }

  const GpuBenchConfig& config_;
  std::ostream& progress_;
  std::size_t segments_ = 0;
};

}  // namespace

GpuResults measureGpus(const GpuBenchConfig& config, const Json& gpus, std::ostream& progress) {
  const int deviceCount = static_cast<int>(gpus.at("gpus").size());
  if (deviceCount == 0) throw BenchFailure("no GPU: " + gpus.value("no_device_reason", "the CUDA runtime sees none"));
  GpuResults results;
  GpuRun run(config, progress);
  // One model's rows, or rows that say why its ranks failed: a GPU run of many models keeps what it measured.
  const auto measureModel = [&](bool nccl, const std::string& model, const std::vector<int>& devices) {
    try {
      return run.measure(nccl, model, devices);
    } catch (const BenchFailure& error) {
      if (interrupted()) throw;
      const std::string why = std::string(nccl ? "nccl " : "cuda_ipc ") + model + " failed: " + error.what();
      progress << "  " << why << "\n";
      results.failures.push_back(why);
      std::vector<GpuMeasurement> rows;
      for (const std::uint64_t bucketMiB : config.bucketMiB) {
        rows.push_back({.channel = nccl ? "nccl" : "cuda_ipc",
                        .model = model,
                        .bucketBytes = bucketMiB * kMiB,
                        .devices = devices,
                        .skipped = std::string("failed: ") + error.what()});
        if (!nccl) break;
      }
      return rows;
    }
  };
  // Under CUDA MPS the ranks' processes share one GPU context per device, which changes what a cuda_ipc round costs
  // (no switching between the sender's and the receivers' contexts): the report says so.
  if (const std::string pipe = mpsPipeDirectory(); !pipe.empty()) {
    results.notes.push_back("under CUDA MPS (a control pipe in " + pipe +
                            "): the processes on one GPU share one context");
  }
  for (const std::string& channel : config.channels) {
    if (channel == "nccl" && config.ncclNetwork) {
      // Every rank its own node to NCCL: they may share the GPUs there are.
      const std::size_t receivers = config.receivers > 0 ? config.receivers : 1;
      std::vector<int> devices;
      for (std::size_t rank = 0; rank <= receivers; ++rank) devices.push_back(static_cast<int>(rank) % deviceCount);
      results.notes.push_back(
          "nccl through NCCL's network transport (--nccl-network: sockets, P2P and SHM off, a "
          "host id per rank; NCCL_SOCKET_IFNAME picks the interface), for the channel and for "
          "the raw ncclBroadcast alike");
      for (const std::string& model : config.models) {
        for (GpuMeasurement& row : measureModel(true, model, devices)) results.nccl.push_back(std::move(row));
      }
    } else if (channel == "nccl" && deviceCount < 2) {
      const std::string why =
          "nccl needs 2 GPUs (NCCL puts one rank on each), this process sees " + std::to_string(deviceCount);
      if (config.channelsGiven) throw BenchFailure(why);
      results.notes.push_back("nccl not measured: " + why);
    } else if (channel == "nccl") {
      const std::size_t receivers = config.receivers > 0 ? config.receivers : static_cast<std::size_t>(deviceCount - 1);
      if (receivers + 1 > static_cast<std::size_t>(deviceCount)) {
        throw BenchFailure("nccl with " + std::to_string(receivers) + " receivers needs " +
                           std::to_string(receivers + 1) + " GPUs, this process sees " + std::to_string(deviceCount));
      }
      std::vector<int> devices;
      for (std::size_t rank = 0; rank <= receivers; ++rank) devices.push_back(static_cast<int>(rank));
      for (const std::string& model : config.models) {
        for (GpuMeasurement& row : measureModel(true, model, devices)) results.nccl.push_back(std::move(row));
      }
    } else {
      for (const int device : config.ipcDevices) {
        if (device < 0 || device >= deviceCount) {
          throw BenchFailure("cuda_ipc: GPU " + std::to_string(device) + " is not visible (this process sees " +
                             std::to_string(deviceCount) + ")");
        }
      }
      std::vector<int> devices(1 + std::max<std::size_t>(config.receivers, 1), config.ipcDevices[1]);
      devices[0] = config.ipcDevices[0];
      for (const std::string& model : config.models) results.cudaIpc.push_back(measureModel(false, model, devices)[0]);
    }
  }
  return results;
}

}  // namespace wsync::bench
