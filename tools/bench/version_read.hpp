#pragma once
// The hot-path read of an agent's applied version from the shared-memory control block
// (ControlBlockView::appliedVersion), beside an acquire load of a process-local std::atomic.
#include <ostream>

#include "bus_config.hpp"

namespace wsync::bench {

// Nanoseconds per read over the timed repetitions.
struct ReadCost {
  double medianNs = 0;
  double minNs = 0;
};

struct VersionReadResult {
  ReadCost shared;           // view.appliedVersion(slot), nobody writing
  ReadCost local;            // std::atomic<uint64_t>::load(acquire) in process memory, nobody writing
  ReadCost sharedContended;  // the same while another thread keeps calling setAppliedVersion
  ReadCost localContended;   // the same while another thread keeps storing to the local atomic
};

VersionReadResult runVersionReadBenchmark(const BusBenchConfig& config, std::ostream& progress);

}  // namespace wsync::bench
