#include "wsync/bus/channel/region_declarations.hpp"

#include <algorithm>
#include <vector>

#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/region_message.hpp"
#include "wsync/bus/protocol/stream_digest.hpp"

namespace wsync::bus {

namespace {

bool isZero(const Digest& digest) { return digest.lo == 0 && digest.hi == 0; }

// The layout's name: the manifest and every declaration, in order.
Digest layoutOf(const msg::TransferPlan& plan, const Digest& manifest) {
  StreamDigest stream;
  const std::uint64_t head[4] = {manifest.lo, manifest.hi, plan.holdings_digests()->size(),
                                 plan.bindings_digests()->size()};
  stream.add(head, sizeof head);
  for (const auto* digests : {plan.holdings_digests(), plan.bindings_digests()}) {
    for (const msg::Digest128* digest : *digests) {
      const std::uint64_t words[2] = {digest->lo(), digest->hi()};
      stream.add(words, sizeof words);
    }
  }
  return stream.digest();
}

}  // namespace

void RegionDeclarations::remember(const Digest& digest) {
  order_.push_back(digest);
  while (order_.size() > kKeptDeclarations) {
    holdings_.erase(order_.front());
    bindings_.erase(order_.front());
    order_.pop_front();
  }
}

tl::expected<void, RegionFailure> RegionDeclarations::add(const msg::Holdings& message) {
  auto decoded = holdingsFromMessage(message);
  if (!decoded) return tl::unexpected(std::move(decoded.error()));
  addOwn(decoded->holdings, decoded->manifest);
  return {};
}

tl::expected<void, RegionFailure> RegionDeclarations::add(const msg::Bindings& message) {
  auto decoded = bindingsFromMessage(message);
  if (!decoded) return tl::unexpected(std::move(decoded.error()));
  addOwn(*decoded);
  return {};
}

void RegionDeclarations::addOwn(const ReceiverBindings& bindings) {
  const Digest digest = digestOf(bindings);
  if (bindings_.emplace(digest, bindings).second) remember(digest);
}

void RegionDeclarations::addOwn(const SourceHoldings& holdings, const Digest& manifest) {
  const Digest digest = digestOf(holdings);
  if (holdings_.emplace(digest, Holdings{holdings, manifest}).second) remember(digest);
}

tl::expected<std::shared_ptr<const RegionPlan>, std::string> RegionDeclarations::planFor(const msg::TransferPlan& plan,
                                                                                         const Manifest& manifest) {
  if (plan.holdings_digests() == nullptr || plan.bindings_digests() == nullptr) {
    return tl::unexpected(std::string("the region plan lists no holdings or no bindings"));
  }
  const Digest layout = layoutOf(plan, manifest.digest());
  for (const KeptPlan& kept : plans_) {
    if (kept.layout == layout) return kept.plan;
  }
  std::vector<SourceHoldings> sources;
  std::vector<std::string> sourceNames;
  for (const msg::Digest128* wire : *plan.holdings_digests()) {
    const Digest digest = fromMessage(*wire);
    // Whole holdings are named like any other: the coordinator sends them too.
    const auto found = holdings_.find(digest);
    if (found == holdings_.end()) {
      return tl::unexpected("holdings " + hex(digest) + " of source " + std::to_string(sources.size()) +
                            " were never sent to this agent");
    }
    if (found->second.manifest != manifest.digest()) {
      return tl::unexpected("holdings " + hex(digest) + " are of manifest " + hex(found->second.manifest) +
                            ", the round's is " + hex(manifest.digest()));
    }
    sources.push_back(found->second.holdings);
    sourceNames.push_back("source " + std::to_string(sourceNames.size()));
  }
  std::vector<ReceiverBindings> receivers;
  std::vector<std::string> receiverNames;
  for (const msg::Digest128* wire : *plan.bindings_digests()) {
    const Digest digest = fromMessage(*wire);
    if (isZero(digest)) {
      receivers.push_back(wholeBindings(manifest));
    } else {
      const auto found = bindings_.find(digest);
      if (found == bindings_.end()) {
        return tl::unexpected("bindings " + hex(digest) + " of receiver " + std::to_string(receivers.size()) +
                              " were never sent to this agent");
      }
      receivers.push_back(found->second);
    }
    receiverNames.push_back("receiver " + std::to_string(receiverNames.size()));
  }
  auto built = RegionPlan::build(manifest, std::move(sources), std::move(receivers), sourceNames, receiverNames);
  if (!built) return tl::unexpected(built.error().describe());
  auto shared = std::make_shared<const RegionPlan>(std::move(*built));
  plans_.push_front(KeptPlan{layout, shared});
  if (plans_.size() > kKeptRegionPlans) plans_.pop_back();
  return shared;
}

}  // namespace wsync::bus
