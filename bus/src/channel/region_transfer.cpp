#include "wsync/bus/channel/region_transfer.hpp"

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

}  // namespace wsync::bus
