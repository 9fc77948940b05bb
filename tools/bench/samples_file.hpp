#pragma once
// How the round-trip agent hands its samples back: it measures (it sends the requests), writes them to a file
// in the runtime folder, and exits; the benchmark reads the file once the agent has exited with status 0.
#include <cstdint>
#include <string>
#include <vector>

namespace wsync::bench {

struct RoundTripSamples {
  std::vector<std::uint64_t> busNs;
  std::vector<std::uint64_t> rawNs;
};

void writeSamples(const std::string& path, const RoundTripSamples& samples);
// Reads and removes the file. Throws BenchFailure when it is missing or malformed.
RoundTripSamples takeSamples(const std::string& path);

}  // namespace wsync::bench
