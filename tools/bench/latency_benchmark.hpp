#pragma once
// The latency half of `wsync-bench bus`: the request/reply round trip and "publish pause, collect N acks", each
// through the bus library and through raw ZeroMQ in the same run, interleaved block by block.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "bus_config.hpp"
#include "bus_messages.hpp"
#include "stats.hpp"

namespace wsync::bench {

// A bus measurement beside its raw ZeroMQ baseline from the same run, in microseconds.
struct LatencyComparison {
  Summary bus;
  Summary raw;
  double p50Ratio() const { return raw.p50 > 0 ? bus.p50 / raw.p50 : 0; }
};
Json toJson(const LatencyComparison& comparison);  // {"bus": ..., "raw": ...}

struct FanoutResult {
  std::size_t agents = 0;
  LatencyComparison latency;
  double joinMs = 0;            // until every agent's SUB had delivered a probe, on both paths
  std::uint64_t staleAcks = 0;  // acks to earlier rounds seen while measuring (expected 0 after the drain)
};

struct LatencyResults {
  LatencyComparison roundTrip;
  std::vector<FanoutResult> fanout;
  MessageSizes sizes;
  std::string busEndpoint;  // an example endpoint, to show the transport in the report
  std::string rawEndpoint;
};

// Progress lines go to `progress`; failures throw BenchFailure after the agents are stopped.
LatencyResults runLatencyBenchmarks(const BusBenchConfig& config, std::ostream& progress);

// The round trip alone, for modes that use it as their same-run baseline (`wsync-bench round`).
LatencyComparison runRoundTripBenchmark(std::size_t roundTrips, std::size_t block, std::ostream& progress);

}  // namespace wsync::bench
