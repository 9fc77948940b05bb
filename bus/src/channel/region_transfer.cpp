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

}  // namespace wsync::bus
