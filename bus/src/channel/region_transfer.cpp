#include "wsync/bus/channel/region_transfer.hpp"

#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::bus {

void PairDigest::add(std::uint64_t bytes, const Digest& digest) {
  // Fixed-size records: no two sequences of deliveries fold to the same bytes.
  struct Record {
    std::uint64_t position;
    std::uint64_t bytes;
    std::uint64_t lo;
    std::uint64_t hi;
  };
  const Record record{deliveries_++, bytes, digest.lo, digest.hi};
  stream_.add(&record, sizeof record);
  bytes_ += bytes;
}

namespace {

// Fixed-size records again: a list of pairs folds to one digest only.
void addPair(StreamDigest& stream, const PairResult& pair) {
  const std::uint64_t record[3] = {pair.bytes, pair.digest.lo, pair.digest.hi};
  stream.add(record, sizeof record);
}

}  // namespace

Digest receiverDigestOf(std::span<const PairResult> fromSources) {
  StreamDigest stream;
  const std::uint64_t count = fromSources.size();
  stream.add(&count, sizeof count);
  for (const PairResult& pair : fromSources) addPair(stream, pair);
  return stream.digest();
}

Digest versionDigestOf(std::span<const Digest> holdings, std::span<const RegionTransferResult> sent) {
  StreamDigest stream;
  const std::uint64_t count = holdings.size();
  stream.add(&count, sizeof count);
  for (std::size_t source = 0; source < holdings.size(); ++source) {
    const std::uint64_t words[3] = {holdings[source].lo, holdings[source].hi,
                                    source < sent.size() ? sent[source].size() : 0};
    stream.add(words, sizeof words);
    if (source < sent.size()) {
      for (const PairResult& pair : sent[source]) addPair(stream, pair);
    }
  }
  return stream.digest();
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<msg::PairDone>>> toMessage(
    flatbuffers::FlatBufferBuilder& fbb, const RegionTransferResult& pairs) {
  std::vector<flatbuffers::Offset<msg::PairDone>> entries;
  entries.reserve(pairs.size());
  for (const PairResult& pair : pairs) {
    const msg::Digest128 digest = toMessage(pair.digest);
    entries.push_back(msg::CreatePairDone(fbb, pair.bytes, &digest));
  }
  return fbb.CreateVector(entries);
}

RegionTransferResult pairsFromMessage(const flatbuffers::Vector<flatbuffers::Offset<msg::PairDone>>* pairs) {
  RegionTransferResult result;
  if (pairs == nullptr) return result;
  result.reserve(pairs->size());
  for (const msg::PairDone* pair : *pairs) {
    result.push_back(PairResult{pair->bytes(), pair->digest() != nullptr ? fromMessage(*pair->digest()) : Digest{}});
  }
  return result;
}

namespace {

std::uint64_t heldBytes(const RegionPlan& plan, const HeldRegion& held) {
  return volume(held.box) * elementBytes(plan.tensors()[held.tensor].dtype);
}

std::uint64_t localBytes(const LocalTensor& local) { return volume(wholeBox(local.shape)) * elementBytes(local.dtype); }

}  // namespace

std::optional<ChannelFailure> checkSourceBuffers(const RegionPlan& plan, std::uint32_t source,
                                                 std::span<const std::span<const std::byte>> buffers) {
  const std::string name = "source " + std::to_string(source);
  if (source >= plan.sourceCount()) {
    return ChannelFailure{ChannelError::PlanMismatch, name + " of a plan of " + std::to_string(plan.sourceCount())};
  }
  const SourceHoldings& holdings = plan.holdings(source);
  if (buffers.size() != holdings.regions.size()) {
    return ChannelFailure{ChannelError::PlanMismatch, name + " has " + std::to_string(buffers.size()) +
                                                          " buffers for " + std::to_string(holdings.regions.size()) +
                                                          " regions"};
  }
  for (std::size_t held = 0; held < buffers.size(); ++held) {
    if (buffers[held].size() != heldBytes(plan, holdings.regions[held])) {
      return ChannelFailure{ChannelError::PlanMismatch,
                            name + "'s region " + std::to_string(held) + " (of '" +
                                plan.tensors()[holdings.regions[held].tensor].name + "') needs " +
                                std::to_string(heldBytes(plan, holdings.regions[held])) +
                                " bytes, the bound buffer has " + std::to_string(buffers[held].size())};
    }
  }
  return std::nullopt;
}

std::optional<ChannelFailure> checkReceiverLocals(const RegionPlan& plan, std::uint32_t receiver,
                                                  std::span<const std::span<std::byte>> locals) {
  const std::string name = "receiver " + std::to_string(receiver);
  if (receiver >= plan.receiverCount()) {
    return ChannelFailure{ChannelError::PlanMismatch, name + " of a plan of " + std::to_string(plan.receiverCount())};
  }
  const ReceiverBindings& bindings = plan.bindings(receiver);
  if (locals.size() != bindings.locals.size()) {
    return ChannelFailure{ChannelError::PlanMismatch, name + " has " + std::to_string(locals.size()) +
                                                          " local tensors for " +
                                                          std::to_string(bindings.locals.size())};
  }
  for (std::size_t local = 0; local < locals.size(); ++local) {
    if (locals[local].size() != localBytes(bindings.locals[local])) {
      return ChannelFailure{ChannelError::PlanMismatch,
                            name + "'s local tensor '" + bindings.locals[local].name + "' needs " +
                                std::to_string(localBytes(bindings.locals[local])) + " bytes, the bound buffer has " +
                                std::to_string(locals[local].size())};
    }
  }
  return std::nullopt;
}

}  // namespace wsync::bus
