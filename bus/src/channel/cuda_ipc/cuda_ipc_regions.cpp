// Region rounds on the cuda_ipc channel (docs/gpu-channels.md, "Region rounds"): every source on a segment of its
// own, exported as the round of one sender exports; every receiver copying from all its sources in one launch and
// checking the sample (region_samples.hpp) of what landed; every source checking the same sample of its buffers.
// The coordinator compares each pair's two digests, so a receiver that read the wrong memory, wrote the wrong
// place or missed a piece never commits.
#include <algorithm>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "channel/cuda_ipc/ipc_segment.hpp"
#include "channel/gpu/cuda_check.hpp"
#include "wsync/bus/channel/cuda_ipc/cuda_ipc_channel.hpp"
#include "wsync/bus/channel/region_samples.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus::gpu {
using namespace ipc;  // the segment's parts (ipc_segment.hpp)

namespace {

std::uint64_t heldBytes(const RegionPlan& plan, const HeldRegion& held) {
  return volume(held.box) * elementBytes(plan.tensors()[held.tensor].dtype);
}

std::string sourceName(std::uint32_t source) { return "source " + std::to_string(source); }

// The checks' digests as pair results: bytes from the plan, the digest from the sample's sums over them.
PairResult pairOf(std::uint64_t bytes, const DeviceChecksumSums& sums) {
  return PairResult{bytes, finishDeviceChecksum(sums, bytes)};
}

}  // namespace

std::string cudaIpcSourceSegmentName(const std::string& segment, std::uint32_t source) {
  return segment + "-s" + std::to_string(source);
}

tl::expected<CudaIpcChannel*, ChannelFailure> CudaIpcChannel::linkOf(std::uint32_t source) {
  if (links_.size() <= source) links_.resize(source + 1);
  if (!links_[source]) {
    auto link = CudaIpcChannel::open(cudaIpcSourceSegmentName(name_, source));
    if (!link) {
      return fail(link.error().code, sourceName(source) + "'s cuda_ipc segment: " + link.error().detail);
    }
    links_[source] = std::move(*link);
  }
  links_[source]->cancel_ = cancel_;
  links_[source]->agentId_ = agentId_;
  links_[source]->setAllocationsKept(allocationsKept());
  return links_[source].get();
}

namespace {

// The key of a table: the plan, this side's index, its buffers' layout, and what it reads from (each source's
// export generation on a receiver).
Digest tableKeyOf(const RegionPlan& plan, std::uint32_t index, const Digest& buffers,
                  std::span<const std::uint64_t> generations) {
  StreamDigest digest;
  digest.add(&plan.digest(), sizeof(Digest));
  digest.add(&index, sizeof index);
  digest.add(&buffers, sizeof buffers);
  digest.add(generations.data(), generations.size_bytes());
  return digest.digest();
}

}  // namespace

tl::expected<void, ChannelFailure> CudaIpcChannel::describeSourceChecks(
    const RegionPlan& plan, std::uint32_t source, std::span<const std::span<const std::byte>> buffers,
    std::span<const std::uint32_t> receivers) {
  RegionState& regions = *regions_;
  const Digest key = tableKeyOf(plan, source, layoutKeyOf(buffers), {});
  if (regions.tableKey == key) return {};
  regions.tableKey.reset();
  regions.table.clear();
  regions.firstCheck = 0;
  for (const std::uint32_t receiver : receivers) {
    regions.table.beginBatch();
    for (const Delivery& delivery : plan.deliveries(source, receiver)) {
      const Segment& segment = plan.segments()[delivery.segment];
      const auto base = reinterpret_cast<std::uint64_t>(buffers[segment.held].data());
      for (const SampledRun& run : sampledRuns(plan, segment, plan.sourceRuns(segment))) {
        regions.table.add(base + run.offset, 0, run.bytes, delivery.segment, run.firstWord * 8);
      }
    }
  }
  if (auto uploaded = regions.table.uploadIfChanged(); !uploaded) return uploaded;
  regions.tableKey = key;
  return {};
}

tl::expected<void, ChannelFailure> CudaIpcChannel::describeReceiverCopies(const RegionPlan& plan,
                                                                          std::uint32_t receiver,
                                                                          std::span<const std::span<std::byte>> locals,
                                                                          std::span<const std::uint32_t> sources) {
  RegionState& regions = *regions_;
  std::vector<std::uint64_t> generations;
  for (const std::uint32_t source : sources) {
    generations.push_back(source);
    generations.push_back(links_[source]->state_->importedGeneration);
  }
  const Digest key = tableKeyOf(plan, receiver, layoutKeyOf(locals), generations);
  if (regions.tableKey == key) return {};
  regions.tableKey.reset();
  regions.table.clear();
  // Batch 0: every piece from every source, straight from its memory into the local tensors, no checksum.
  regions.table.beginBatch();
  for (const std::uint32_t source : sources) {
    const CudaIpcChannel& link = *links_[source];
    const IpcSenderData& sender = control(link.region_).sender;
    const SourceHoldings& holdings = plan.holdings(source);
    if (sender.tensorCount != holdings.regions.size()) {
      return fail(ChannelError::PlanMismatch, sourceName(source) + " exported " + std::to_string(sender.tensorCount) +
                                                  " buffers, its holdings have " +
                                                  std::to_string(holdings.regions.size()) + " regions");
    }
    const IpcTensorData* entries = tensorTable(link.region_);
    for (const Delivery& delivery : plan.deliveries(source, receiver)) {
      const Segment& segment = plan.segments()[delivery.segment];
      const IpcTensorData entry = entries[segment.held];
      if (entry.bytes != heldBytes(plan, holdings.regions[segment.held]) ||
          entry.allocation >= link.state_->importOf.size()) {
        return fail(ChannelError::PlanMismatch, sourceName(source) + "'s region " + std::to_string(segment.held) +
                                                    " (of '" + plan.tensors()[segment.tensor].name + "') has " +
                                                    std::to_string(entry.bytes) + " bytes exported, its holdings " +
                                                    std::to_string(heldBytes(plan, holdings.regions[segment.held])));
      }
      const std::uint64_t from =
          reinterpret_cast<std::uint64_t>(link.state_->importOf[entry.allocation]) + entry.offset;
      const auto into = reinterpret_cast<std::uint64_t>(locals[plan.localOf(receiver, delivery)].data());
      for (const bus::CopyRun& run : plan.copyRuns(receiver, delivery)) {
        regions.table.add(from + run.source, into + run.destination, run.bytes, 0, 0);
      }
    }
  }
  // Batch 1 + k: the sample of what landed from source k, read back from the local tensors.
  regions.firstCheck = 1;
  for (const std::uint32_t source : sources) {
    regions.table.beginBatch();
    for (const Delivery& delivery : plan.deliveries(source, receiver)) {
      const Segment& segment = plan.segments()[delivery.segment];
      const auto base = reinterpret_cast<std::uint64_t>(locals[plan.localOf(receiver, delivery)].data());
      for (const SampledRun& run : sampledRuns(plan, segment, plan.destinationRuns(receiver, delivery))) {
        regions.table.add(base + run.offset, 0, run.bytes, delivery.segment, run.firstWord * 8);
      }
    }
  }
  if (auto uploaded = regions.table.uploadIfChanged(); !uploaded) return uploaded;
  regions.tableKey = key;
  return {};
}

namespace {

// Launches batch `batch` of `regions`' table on `stream`, reporting to reporter `check` (a checking batch) or not at
// all (check < 0: the receiver's copies, which the checks after them on the stream vouch for).
tl::expected<void, ChannelFailure> launchBatch(CudaIpcChannel::RegionState& regions, std::size_t batch, int check,
                                               cudaStream_t stream) {
  if (check < 0) return regions.table.launch(batch, nullptr, detail::CopyReport{}, kCopyBlocks, stream);
  auto& reporter = regions.reporters[static_cast<std::size_t>(check)];
  regions.reports[static_cast<std::size_t>(check)] = reporter.next();
  return regions.table.launch(batch, reporter.deviceSums(), regions.reports[static_cast<std::size_t>(check)],
                              kCopyBlocks, stream);
}

// Reporters for `count` checks, made on the current device as needed, and zeroed where a failed round may have
// left them midway.
tl::expected<void, ChannelFailure> prepareReporters(CudaIpcChannel::RegionState& regions, std::size_t count,
                                                    cudaStream_t stream) {
  if (!regions.reportersClean) {
    for (auto& reporter : regions.reporters) {
      if (auto reset = reporter.reset(stream); !reset) return reset;
    }
    regions.reportersClean = true;
  }
  while (regions.reporters.size() < count) {
    auto reporter = detail::CopyReporter::create();
    if (!reporter) return tl::unexpected(reporter.error());
    regions.reporters.push_back(std::move(*reporter));
  }
  regions.reports.resize(regions.reporters.size());
  return {};
}

}  // namespace

tl::expected<std::vector<DeviceChecksumSums>, ChannelFailure> CudaIpcChannel::waitForChecks(std::size_t count) {
  RegionState& regions = *regions_;
  std::vector<DeviceChecksumSums> sums;
  for (std::size_t check = 0; check < count; ++check) {
    auto reported = waitForCopy(regions.reporters[check], regions.reports[check]);
    if (!reported) return tl::unexpected(reported.error());
    sums.push_back(*reported);
  }
  regions.reportersClean = true;
  return sums;
}

tl::expected<RegionTransferResult, ChannelFailure> CudaIpcChannel::sendRegions(
    std::uint64_t transfer, const RegionPlan& plan, std::uint32_t source,
    std::span<const std::span<const std::byte>> buffers, std::chrono::steady_clock::time_point deadline) {
  if (auto wrong = checkSourceBuffers(plan, source, buffers)) return tl::unexpected(std::move(*wrong));
  RegionTransferResult result(plan.receiverCount(), PairDigest().result());
  std::vector<std::uint32_t> receivers;
  for (std::uint32_t receiver = 0; receiver < plan.receiverCount(); ++receiver) {
    if (!plan.deliveries(source, receiver).empty()) receivers.push_back(receiver);
  }
  if (receivers.empty()) return result;  // nobody takes anything from it: its segment is not even opened

  auto opened = linkOf(source);
  if (!opened) return tl::unexpected(opened.error());
  CudaIpcChannel& link = **opened;
  State& state = *link.state_;
  const IpcHeaderData& header = control(link.region_).header;
  if (plan.receiverCount() > header.maxReceivers || buffers.size() > header.maxTensors) {
    return fail(ChannelError::InvalidGeometry,
                std::to_string(plan.receiverCount()) + " receivers and " + std::to_string(buffers.size()) +
                    " buffers: the segment has room for " + std::to_string(header.maxReceivers) + " and " +
                    std::to_string(header.maxTensors));
  }
  WSYNC_CUDA_TRY(cudaSetDevice(state.device));
  if (!link.regions_) link.regions_ = std::make_unique<RegionState>();
  if (auto exported = link.exportTensors(buffers); !exported) return tl::unexpected(exported.error());
  if (auto built = link.describeSourceChecks(plan, source, buffers, receivers); !built) {
    return tl::unexpected(built.error());
  }
  RegionState& regions = *link.regions_;
  if (auto ready = prepareReporters(regions, receivers.size(), state.stream); !ready) {
    return tl::unexpected(ready.error());
  }
  // The checks read the buffers while the receivers copy them: the sample costs this side a 64th of a pass.
  regions.reportersClean = false;
  for (std::size_t check = 0; check < receivers.size(); ++check) {
    if (auto launched = launchBatch(regions, check, static_cast<int>(check), state.stream); !launched) {
      return tl::unexpected(launched.error());
    }
  }
  publish(control(link.region_).sender.readyTransfer, control(link.region_).sender.notify, transfer);
  if (auto copied = link.waitForReceivers(transfer, receivers, deadline); !copied) {
    return tl::unexpected(ChannelFailure{copied.error().code, sourceName(source) + ": " + copied.error().detail});
  }
  auto sums = link.waitForChecks(receivers.size());
  if (!sums) return tl::unexpected(sums.error());
  for (std::size_t check = 0; check < receivers.size(); ++check) {
    result[receivers[check]] = pairOf(plan.bytes(source, receivers[check]), (*sums)[check]);
  }
  reportProgress(plan.bytesRead(source));
  return result;
}

tl::expected<RegionTransferResult, ChannelFailure> CudaIpcChannel::receiveRegions(
    std::uint64_t transfer, const RegionPlan& plan, std::uint32_t receiver,
    std::span<const std::span<std::byte>> locals, std::chrono::steady_clock::time_point deadline) {
  if (auto wrong = checkReceiverLocals(plan, receiver, locals)) return tl::unexpected(std::move(*wrong));
  RegionTransferResult result(plan.sourceCount(), PairDigest().result());
  std::vector<std::uint32_t> sources;
  for (std::uint32_t source = 0; source < plan.sourceCount(); ++source) {
    if (!plan.deliveries(source, receiver).empty()) sources.push_back(source);
  }
  if (sources.empty()) return result;

  // Named in every source's slot before anything can fail; from then on each source waits for that slot, so a
  // failure is published in all of them.
  std::vector<IpcReceiverData*> slots;
  for (const std::uint32_t source : sources) {
    auto link = linkOf(source);
    if (!link) return tl::unexpected(link.error());
    IpcControlData& data = control((*link)->region_);
    if (receiver >= data.header.maxReceivers) {
      return fail(ChannelError::InvalidGeometry, "receiver " + std::to_string(receiver) + " of " +
                                                     std::to_string(data.header.maxReceivers) + " in " +
                                                     sourceName(source) + "'s segment");
    }
    IpcReceiverData& slot = data.receivers[receiver];
    slot.pid = static_cast<std::uint32_t>(::getpid());
    nameReceiver(slot, agentId_, transfer);
    slots.push_back(&slot);
  }
  auto failed = [&](ChannelFailure failure) -> tl::expected<RegionTransferResult, ChannelFailure> {
    for (IpcReceiverData* slot : slots) publish(slot->failedTransfer, slot->notify, transfer);
    return tl::unexpected(std::move(failure));
  };
  State& state = *state_;
  state.timing = IpcRoundTiming{.receiveCalled = monotonicNs()};
  if (const cudaError_t error = cudaSetDevice(state.device); error != cudaSuccess) {
    return failed(detail::cudaFailure("cudaSetDevice", error));
  }
  for (const std::uint32_t source : sources) {
    CudaIpcChannel& link = *links_[source];
    if (auto published = link.waitForSender(transfer, deadline); !published) {
      return failed(ChannelFailure{published.error().code, sourceName(source) + ": " + published.error().detail});
    }
    if (auto imported = link.importExport(); !imported) {
      return failed(ChannelFailure{imported.error().code, sourceName(source) + ": " + imported.error().detail});
    }
  }
  state.timing.sawPublished = monotonicNs();
  if (!regions_) regions_ = std::make_unique<RegionState>();
  if (auto built = describeReceiverCopies(plan, receiver, locals, sources); !built) return failed(built.error());
  RegionState& regions = *regions_;
  if (auto ready = prepareReporters(regions, sources.size(), state.stream); !ready) return failed(ready.error());
  regions.reportersClean = false;
  if (auto copied = launchBatch(regions, 0, -1, state.stream); !copied) return failed(copied.error());
  for (std::size_t check = 0; check < sources.size(); ++check) {
    if (auto launched = launchBatch(regions, regions.firstCheck + check, static_cast<int>(check), state.stream);
        !launched) {
      return failed(launched.error());
    }
  }
  state.timing.launched = monotonicNs();
  auto sums = waitForChecks(sources.size());
  if (!sums) return failed(sums.error());
  state.timing.copied = monotonicNs();
  for (std::size_t at = 0; at < sources.size(); ++at) {
    const PairResult pair = pairOf(plan.bytes(sources[at], receiver), (*sums)[at]);
    result[sources[at]] = pair;
    IpcReceiverData& slot = *slots[at];
    slot.bytes = pair.bytes;
    slot.digestLo = pair.digest.lo;
    slot.digestHi = pair.digest.hi;
    publish(slot.doneTransfer, slot.notify, transfer);
  }
  state.timing.reported = monotonicNs();
  reportProgress(plan.bytesReceived(receiver));
  return result;
}

}  // namespace wsync::bus::gpu
