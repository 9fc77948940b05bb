#include "channel/tcp/region_digests.hpp"

#include <algorithm>
#include <string>

namespace wsync::bus::tcp {

SegmentDigests::SegmentDigests(const RegionPlan& plan, std::uint32_t source)
    : plan_(plan),
      source_(source),
      order_(plan.segmentsOf(source)),
      done_(order_.size(), 0),
      digests_(order_.size(), StreamDigest().digest()),
      open_(order_.size()) {}

std::uint32_t SegmentDigests::positionOf(std::uint32_t segment) const {
  return static_cast<std::uint32_t>(std::lower_bound(order_.begin(), order_.end(), segment) - order_.begin());
}

void SegmentDigests::sent(const PayloadStream& stream, std::uint64_t from, std::uint64_t to) {
  const auto& deliveries = stream.deliveries();
  auto delivery =
      std::upper_bound(deliveries.begin(), deliveries.end(), from,
                       [](std::uint64_t at, const PayloadStream::DeliveryEnd& end) { return at < end.end; });
  for (; delivery != deliveries.end(); ++delivery) {
    const std::uint64_t start = delivery == deliveries.begin() ? 0 : (delivery - 1)->end;
    if (start >= to) break;
    const std::uint32_t position = positionOf(delivery->segment);
    if (position >= order_.size() || order_[position] != delivery->segment) continue;  // not this source's
    const std::uint64_t reached = std::min(to, delivery->end) - start;
    if (reached <= done_[position]) continue;
    if (!open_[position]) open_[position] = std::make_unique<StreamDigest>();
    stream.digestRange(start + done_[position], start + reached, *open_[position]);
    digested_ += reached - done_[position];
    done_[position] = reached;
    if (reached == delivery->end - start) {
      digests_[position] = open_[position]->digest();
      open_[position].reset();
    }
  }
}

tl::expected<RegionTransferResult, ChannelFailure> SegmentDigests::results() const {
  RegionTransferResult results(plan_.receiverCount());
  for (std::uint32_t receiver = 0; receiver < plan_.receiverCount(); ++receiver) {
    PairDigest pair;
    for (const Delivery& delivery : plan_.deliveries(source_, receiver)) {
      const std::uint32_t position = positionOf(delivery.segment);
      const std::uint64_t bytes = plan_.segments()[delivery.segment].bytes;
      if (position >= order_.size() || done_[position] != bytes) {
        return fail(ChannelError::PlanMismatch, "source " + std::to_string(source_) + " sent segment " +
                                                    std::to_string(delivery.segment) + " of receiver " +
                                                    std::to_string(receiver) + " short");
      }
      pair.add(bytes, digests_[position]);
    }
    results[receiver] = pair.result();
  }
  return results;
}

void DeliveryDigests::upTo(const PayloadStream& stream, std::uint64_t position) {
  const auto& deliveries = stream.deliveries();
  while (next_ < deliveries.size()) {
    const std::uint64_t end = deliveries[next_].end;
    const std::uint64_t until = std::min(end, position);
    if (!current_) current_.emplace();
    stream.digestUpTo(digested_, until, *current_);
    if (until < end) return;
    pair_.add(end - start_, current_->digest());
    current_.reset();
    start_ = end;
    ++next_;
  }
}

}  // namespace wsync::bus::tcp
