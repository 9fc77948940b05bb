#include "wsync/bus/channel/region_plan.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {
namespace {

// A distinct region of one tensor and the sources holding it (replicas hold equal regions), lowest source first.
struct Holders {
  const Box* box = nullptr;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> holders;  // (source, held region index)
};

// One receiver's part of one distinct held region, where it goes, and the holder that sends it.
struct Choice {
  std::uint32_t source = 0;
  std::uint32_t held = 0;  // the region of the source's holdings
  std::uint32_t tensor = 0;
  std::uint32_t distinct = 0;  // index among the tensor's distinct held regions, which are sorted by box
  Box part;
  SegmentTarget target;
};

bool lessBox(const Box& a, const Box& b) { return std::tie(a.offset, a.extent) < std::tie(b.offset, b.extent); }

// A source's send order, and a receiver's delivery order from each source: by tensor, held region, part, then
// receiver and bound region.
bool sendOrderLess(const Choice& a, const Choice& b) {
  if (a.tensor != b.tensor) return a.tensor < b.tensor;
  if (a.distinct != b.distinct) return a.distinct < b.distinct;
  if (a.part != b.part) return lessBox(a.part, b.part);
  return std::tie(a.target.receiver, a.target.bound) < std::tie(b.target.receiver, b.target.bound);
}

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
  // Each receiver's parts, each given to the holder that sends this receiver the fewest bytes so far (ties to the
  // lowest source). What a receiver takes from whom then depends only on the holdings and its own bindings: a
  // receiver plans without the others' bindings, and receivers with equal bindings choose alike and share segments.
  std::vector<Choice> choices;
  std::vector<std::uint64_t> load(sourceCount);
  std::vector<std::uint32_t> bound;
  for (std::uint32_t receiver = 0; receiver < receiverCount; ++receiver) {
    const auto& tensorOf = plan.boundTensors_[receiver];
    bound.resize(tensorOf.size());
    for (std::uint32_t index = 0; index < bound.size(); ++index) bound[index] = index;
    std::stable_sort(bound.begin(), bound.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return tensorOf[a] < tensorOf[b]; });
    std::fill(load.begin(), load.end(), 0);
    const std::size_t first = choices.size();
    for (const std::uint32_t index : bound) {
      const std::uint32_t tensor = tensorOf[index];
      const Box& region = plan.receivers_[receiver].regions[index].region;
      for (std::uint32_t distinct = 0; distinct < held[tensor].size(); ++distinct) {
        if (!meets(*held[tensor][distinct].box, region)) continue;
        choices.push_back(Choice{0, 0, tensor, distinct, intersect(*held[tensor][distinct].box, region),
                                 SegmentTarget{receiver, index}});
      }
    }
    // Within one receiver, in the order its deliveries will have, so the balance is the same wherever it is computed.
    std::sort(choices.begin() + static_cast<std::ptrdiff_t>(first), choices.end(), sendOrderLess);
    for (auto choice = choices.begin() + static_cast<std::ptrdiff_t>(first); choice != choices.end(); ++choice) {
      const auto& holders = held[choice->tensor][choice->distinct].holders;
      auto chosen = holders.front();
      for (const auto& holder : holders) {
        if (load[holder.first] < load[chosen.first]) chosen = holder;
      }
      choice->source = chosen.first;
      choice->held = chosen.second;
      load[chosen.first] += volume(choice->part) * elementBytes(manifest.tensors()[choice->tensor].dtype);
    }
  }

  // Segments: equal parts of one source, in its send order (manifest order, then by box), with their targets.
  std::sort(choices.begin(), choices.end(), [](const Choice& a, const Choice& b) {
    if (a.source != b.source) return a.source < b.source;
    return sendOrderLess(a, b);
  });
  plan.sourceRead_.assign(sourceCount, 0);
  plan.sourceFirst_.assign(sourceCount + 1, 0);
  for (std::size_t first = 0; first < choices.size();) {
    const Choice& head = choices[first];
    std::size_t end = first + 1;
    while (end < choices.size() && choices[end].source == head.source && choices[end].tensor == head.tensor &&
           choices[end].distinct == head.distinct && choices[end].part == head.part) {
      ++end;
    }
    const std::uint64_t bytes = volume(head.part) * elementBytes(manifest.tensors()[head.tensor].dtype);
    plan.sourceRead_[head.source] += bytes;
    plan.sendOrder_.push_back(static_cast<std::uint32_t>(plan.segments_.size()));
    plan.segments_.push_back(Segment{head.source, head.held, head.tensor, bytes,
                                     static_cast<std::uint32_t>(plan.targets_.size()),
                                     static_cast<std::uint32_t>(end - first)});
    for (std::size_t index = first; index < end; ++index) plan.targets_.push_back(choices[index].target);
    ++plan.sourceFirst_[head.source + 1];
    first = end;
  }
  for (std::size_t source = 0; source < sourceCount; ++source)
    plan.sourceFirst_[source + 1] += plan.sourceFirst_[source];

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
  // What the plan is a function of, for those that keep what they derived from it across rounds.
  StreamDigest digest;
  const Digest manifestDigest = manifest.digest();
  digest.add(&manifestDigest, sizeof manifestDigest);
  for (const SourceHoldings& holdings : plan.sources_) {
    const Digest of = digestOf(holdings);
    digest.add(&of, sizeof of);
  }
  for (const ReceiverBindings& bindings : plan.receivers_) {
    const Digest of = digestOf(bindings);
    digest.add(&of, sizeof of);
  }
  plan.digest_ = digest.digest();
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
