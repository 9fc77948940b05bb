#pragma once
// `wsync-bench tcp`: the tcp channel over loopback (the sender and its receivers threads of this process) beside a
// raw TCP send/recv of the same bytes over loopback connections, in the same run.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "report.hpp"

namespace wsync::bench {

// A model of hundreds of MiB over loopback takes a fraction of a second: two minutes means a stuck transfer.
inline constexpr std::chrono::milliseconds kTcpTransferTimeout{120'000};
// The first round faults the receivers' pages in and grows the sockets' buffers.
inline constexpr std::size_t kTcpWarmupRounds = 1;
// The raw baseline's write to one connection at a time: the channel's chunk (kTcpChunkBytes).
inline constexpr std::size_t kRawChunkBytes = std::size_t{1} << 20;

struct TcpBenchConfig {
  ModeOptions mode;
  std::vector<std::string> models{"opt-125m", "synthetic:2000:512"};
  std::vector<std::size_t> receivers{1, 3};
  std::uint64_t bucketMiB = 4;  // the coordinator's default: where progress is reported
  std::size_t repetitions = 9;  // timed per path and measurement
  void quick() {
    models = {"opt-125m"};
    receivers = {1};
    repetitions = 3;
  }
};

void runTcpBenchmark(const TcpBenchConfig& config, Report& report);

}  // namespace wsync::bench
