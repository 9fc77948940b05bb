#include "wsync/bus/channel/region_plan.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::bus {
namespace {

// A distinct region of one tensor and the sources holding it (replicas hold equal regions), lowest source first.
struct Holders {
  const Box* box = nullptr;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> holders;  // (source, held region index)
};

// One receiver's want of one distinct region's part: the part, and where it goes.
struct Want {
  std::uint32_t distinct = 0;
  Box part;
  SegmentTarget target;
};

bool lessBox(const Box& a, const Box& b) { return std::tie(a.offset, a.extent) < std::tie(b.offset, b.extent); }

// Where `part` (a sub-box of bound region `region`, in tensor coordinates) lies in the local tensor: the dimensions
// of the region and of its place that are not 1 correspond in order (BoundRegion), so each such dimension of the
// place is narrowed as the part narrows the region's.
Box placeOf(const BoundRegion& bound, const Box& part) {
  Box place{bound.localOffset, bound.localExtent};
  std::size_t local = 0;
  for (std::size_t d = 0; d < bound.region.extent.size(); ++d) {
    if (bound.region.extent[d] == 1) continue;
    while (local < place.extent.size() && bound.localExtent[local] == 1) ++local;
    place.offset[local] += part.offset[d] - bound.region.offset[d];
    place.extent[local] = part.extent[d];
    ++local;
  }
  return place;
}

}  // namespace

std::vector<ByteRun> runsOf(std::span<const std::int64_t> shape, const Box& part, std::size_t elementBytes) {
  std::vector<ByteRun> runs;
  const std::size_t rank = shape.size();
  if (volume(part) == 0) return runs;
  // The run: the trailing dimensions the part spans whole, and the one before them, as far as it goes.
  std::size_t inner = rank;  // the first dimension of the run
  std::uint64_t runElements = 1;
  while (inner > 0) {
    --inner;
    runElements *= static_cast<std::uint64_t>(part.extent[inner]);
    if (part.extent[inner] != shape[inner]) break;
  }
  std::vector<std::uint64_t> stride(rank, 1);  // elements
  for (std::size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * static_cast<std::uint64_t>(shape[d]);
  // Walk every index of the dimensions before the run.
  std::vector<std::int64_t> at(part.offset.begin(), part.offset.end());
  while (true) {
    std::uint64_t element = 0;
    for (std::size_t d = 0; d < rank; ++d) element += static_cast<std::uint64_t>(at[d]) * stride[d];
    const std::uint64_t offset = element * elementBytes;
    const std::uint64_t bytes = runElements * elementBytes;
    if (!runs.empty() && runs.back().offset + runs.back().bytes == offset) {
      runs.back().bytes += bytes;
    } else {
      runs.push_back(ByteRun{offset, bytes});
    }
    std::size_t d = inner;
    while (d > 0) {
      --d;
      if (++at[d] < part.offset[d] + part.extent[d]) break;
      at[d] = part.offset[d];
      if (d == 0) return runs;
    }
    if (inner == 0) return runs;
  }
}

std::vector<CopyRun> pairRuns(std::span<const ByteRun> from, std::span<const ByteRun> to) {
  std::vector<CopyRun> copies;
  std::size_t i = 0;
  std::size_t j = 0;
  std::uint64_t doneFrom = 0;  // bytes of from[i] already paired
  std::uint64_t doneTo = 0;
  while (i < from.size() && j < to.size()) {
    const std::uint64_t bytes = std::min(from[i].bytes - doneFrom, to[j].bytes - doneTo);
    copies.push_back(CopyRun{from[i].offset + doneFrom, to[j].offset + doneTo, bytes});
    doneFrom += bytes;
    doneTo += bytes;
    if (doneFrom == from[i].bytes) {
      ++i;
      doneFrom = 0;
    }
    if (doneTo == to[j].bytes) {
      ++j;
      doneTo = 0;
    }
  }
  return copies;
}

tl::expected<RegionPlan, RegionFailure> RegionPlan::build(const Manifest& manifest, std::vector<SourceHoldings> sources,
                                                          std::vector<ReceiverBindings> receivers,
                                                          std::span<const std::string> sourceNames,
                                                          std::span<const std::string> receiverNames) {
  if (sources.empty()) return fail(RegionError::Gap, "a version needs at least one source");
  for (std::size_t source = 0; source < sources.size(); ++source) {
    if (auto checked = checkHoldings(manifest, sources[source], sourceNames[source]); !checked) {
      return tl::unexpected(std::move(checked.error()));
    }
  }
  if (auto covered = checkCoverage(manifest, sources, sourceNames); !covered) {
    return tl::unexpected(std::move(covered.error()));
  }
  RegionPlan plan;
  for (std::size_t receiver = 0; receiver < receivers.size(); ++receiver) {
    auto tensors = checkBindings(manifest, receivers[receiver], receiverNames[receiver]);
    if (!tensors) return tl::unexpected(std::move(tensors.error()));
    plan.boundTensors_.push_back(std::move(*tensors));
  }

  plan.tensors_ = manifest.tensors();
  plan.sources_ = std::move(sources);
  plan.receivers_ = std::move(receivers);
  const std::size_t sourceCount = plan.sources_.size();
  const std::size_t receiverCount = plan.receivers_.size();

  // Per tensor: its distinct held regions with their holders, and the bound regions that want it.
  std::vector<std::vector<Holders>> held(manifest.size());
  for (std::uint32_t source = 0; source < sourceCount; ++source) {
    const auto& regions = plan.sources_[source].regions;
    for (std::uint32_t index = 0; index < regions.size(); ++index) {
      auto& distinct = held[regions[index].tensor];
      auto same = std::find_if(distinct.begin(), distinct.end(),
                               [&](const Holders& other) { return *other.box == regions[index].box; });
      if (same == distinct.end()) same = distinct.insert(distinct.end(), Holders{&regions[index].box, {}});
      same->holders.emplace_back(source, index);
    }
  }
  for (auto& distinct : held) {
    std::sort(distinct.begin(), distinct.end(),
              [](const Holders& a, const Holders& b) { return lessBox(*a.box, *b.box); });
  }
  std::vector<std::vector<SegmentTarget>> wanted(manifest.size());
  for (std::uint32_t receiver = 0; receiver < receiverCount; ++receiver) {
    const auto& regions = plan.receivers_[receiver].regions;
    for (std::uint32_t index = 0; index < regions.size(); ++index) {
      wanted[plan.boundTensors_[receiver][index]].push_back(SegmentTarget{receiver, index});
    }
  }

  std::vector<std::uint64_t> load(sourceCount, 0);  // bytes each source sends so far
  std::vector<std::vector<std::uint32_t>> order(sourceCount);
  plan.sourceRead_.assign(sourceCount, 0);
  std::vector<Want> wants;
  for (std::uint32_t tensor = 0; tensor < manifest.size(); ++tensor) {
    if (wanted[tensor].empty()) continue;
    const std::size_t element = elementBytes(manifest.tensors()[tensor].dtype);
    wants.clear();
    for (const SegmentTarget& target : wanted[tensor]) {
      const Box& region = plan.receivers_[target.receiver].regions[target.bound].region;
      for (std::uint32_t distinct = 0; distinct < held[tensor].size(); ++distinct) {
        if (!meets(*held[tensor][distinct].box, region)) continue;
        wants.push_back(Want{distinct, intersect(*held[tensor][distinct].box, region), target});
      }
    }
    std::sort(wants.begin(), wants.end(), [](const Want& a, const Want& b) {
      if (a.distinct != b.distinct) return a.distinct < b.distinct;
      if (a.part != b.part) return lessBox(a.part, b.part);
      return std::tie(a.target.receiver, a.target.bound) < std::tie(b.target.receiver, b.target.bound);
    });
    for (std::size_t first = 0; first < wants.size();) {
      std::size_t end = first + 1;
      while (end < wants.size() && wants[end].distinct == wants[first].distinct &&
             wants[end].part == wants[first].part) {
        ++end;
      }
      const std::uint64_t bytes = volume(wants[first].part) * element;
      const auto targetCount = static_cast<std::uint32_t>(end - first);
      // The least loaded holder; ties go to the lowest source, so every agent picks the same.
      const auto& holders = held[tensor][wants[first].distinct].holders;
      auto chosen = holders.front();
      for (const auto& holder : holders) {
        if (load[holder.first] < load[chosen.first]) chosen = holder;
      }
      load[chosen.first] += bytes * targetCount;
      plan.sourceRead_[chosen.first] += bytes;
      order[chosen.first].push_back(static_cast<std::uint32_t>(plan.segments_.size()));
      plan.segments_.push_back(Segment{chosen.first, chosen.second, tensor, bytes,
                                       static_cast<std::uint32_t>(plan.targets_.size()), targetCount});
      for (std::size_t index = first; index < end; ++index) plan.targets_.push_back(wants[index].target);
      first = end;
    }
  }

  plan.sourceFirst_.reserve(sourceCount + 1);
  for (const auto& sent : order) {
    plan.sourceFirst_.push_back(static_cast<std::uint32_t>(plan.sendOrder_.size()));
    plan.sendOrder_.insert(plan.sendOrder_.end(), sent.begin(), sent.end());
  }
  plan.sourceFirst_.push_back(static_cast<std::uint32_t>(plan.sendOrder_.size()));

  // Deliveries pair by pair, each in its source's send order.
  plan.pairBytes_.assign(sourceCount * receiverCount, 0);
  std::vector<std::vector<Delivery>> pairs(sourceCount * receiverCount);
  for (std::uint32_t source = 0; source < sourceCount; ++source) {
    for (const std::uint32_t index : plan.segmentsOf(source)) {
      const Segment& segment = plan.segments_[index];
      for (const SegmentTarget& target : plan.targetsOf(segment)) {
        pairs[source * receiverCount + target.receiver].push_back(Delivery{index, target.bound});
        plan.pairBytes_[source * receiverCount + target.receiver] += segment.bytes;
      }
    }
  }
  plan.pairFirst_.reserve(pairs.size() + 1);
  for (const auto& pair : pairs) {
    plan.pairFirst_.push_back(static_cast<std::uint32_t>(plan.deliveries_.size()));
    plan.deliveries_.insert(plan.deliveries_.end(), pair.begin(), pair.end());
  }
  plan.pairFirst_.push_back(static_cast<std::uint32_t>(plan.deliveries_.size()));
  return plan;
}

std::span<const std::uint32_t> RegionPlan::segmentsOf(std::uint32_t source) const {
  return std::span(sendOrder_).subspan(sourceFirst_[source], sourceFirst_[source + 1] - sourceFirst_[source]);
}

std::span<const Delivery> RegionPlan::deliveries(std::uint32_t source, std::uint32_t receiver) const {
  const std::size_t pair = source * receivers_.size() + receiver;
  return std::span(deliveries_).subspan(pairFirst_[pair], pairFirst_[pair + 1] - pairFirst_[pair]);
}

std::uint64_t RegionPlan::bytesSent(std::uint32_t source) const {
  std::uint64_t bytes = 0;
  for (std::uint32_t receiver = 0; receiver < receivers_.size(); ++receiver) bytes += this->bytes(source, receiver);
  return bytes;
}

std::uint64_t RegionPlan::bytesReceived(std::uint32_t receiver) const {
  std::uint64_t bytes = 0;
  for (std::uint32_t source = 0; source < sources_.size(); ++source) bytes += this->bytes(source, receiver);
  return bytes;
}

std::size_t RegionPlan::elementBytesOf(std::uint32_t tensor) const { return elementBytes(tensors_[tensor].dtype); }

Box RegionPlan::boxOf(const Segment& segment) const {
  const SegmentTarget& first = targets_[segment.firstTarget];
  return intersect(sources_[segment.source].regions[segment.held].box,
                   receivers_[first.receiver].regions[first.bound].region);
}

std::vector<ByteRun> RegionPlan::sourceRuns(const Segment& segment) const {
  const Box& held = sources_[segment.source].regions[segment.held].box;
  Box part = boxOf(segment);
  for (std::size_t d = 0; d < part.offset.size(); ++d) part.offset[d] -= held.offset[d];
  return runsOf(held.extent, part, elementBytesOf(segment.tensor));
}

std::vector<ByteRun> RegionPlan::destinationRuns(std::uint32_t receiver, const Delivery& delivery) const {
  const Segment& segment = segments_[delivery.segment];
  const BoundRegion& bound = receivers_[receiver].regions[delivery.bound];
  const LocalTensor& local = receivers_[receiver].locals[bound.local];
  return runsOf(local.shape, placeOf(bound, boxOf(segment)), elementBytesOf(segment.tensor));
}

std::vector<CopyRun> RegionPlan::copyRuns(std::uint32_t receiver, const Delivery& delivery) const {
  const std::vector<ByteRun> from = sourceRuns(segments_[delivery.segment]);
  const std::vector<ByteRun> to = destinationRuns(receiver, delivery);
  return pairRuns(from, to);
}

}  // namespace wsync::bus
