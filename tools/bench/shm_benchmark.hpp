#pragma once
// The measurements of `wsync-bench shm`: the shm channel from this process (the sender, which owns the arena) to
// receiver processes, beside memcpy of the same tensors within this process, interleaved round by round.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "shm_config.hpp"
#include "stats.hpp"

namespace wsync::bench {

// Throughputs in GB/s (10^9 bytes per second of model bytes) over the timed repetitions.
struct ShmMeasurement {
  std::string model;
  std::size_t tensors = 0;
  std::uint64_t modelBytes = 0;
  std::size_t receivers = 0;
  std::uint64_t bucketBytes = 0;
  std::uint32_t buffers = 0;
  std::uint32_t buckets = 0;  // of the plan

  Summary channel;     // from the sender's start until the last receiver finished: what each receiver got
  Summary sender;      // from the sender's start until send() returned (the last bucket published)
  Summary memcpy;      // in this process, tensor by tensor from the source to a second copy of the model
  Summary copyDigest;  // memcpy, then XXH3-128 over the copy: the plain way to move and check the bytes
  // GB per CPU-second of the thread doing the work (sleeps excluded), robust against other processes' load: how fast
  // each side would go on a core of its own. For several receivers, the one that took the most.
  Summary senderCpu;
  Summary receiverCpu;
  Summary memcpyCpu;
  Summary copyDigestCpu;

  std::size_t digestsCompared = 0;  // receivers x transfers, warm-up included
  std::size_t digestsEqual = 0;     // a receiver's digest and byte count equal to the sender's
  std::string skipped;              // why the measurement did not run; empty when it did
  double othersCpuShare = 0;        // of all CPU time during the measurement, used by other processes
  std::size_t busyRounds = 0;       // --wait-for-quiet: rounds that started without the machine having been quiet

  double ratio() const { return memcpy.median > 0 ? channel.median / memcpy.median : 0; }
};

struct ShmResults {
  std::vector<ShmMeasurement> single;  // one receiver, the configured geometry, one per model
  std::vector<ShmMeasurement> fanout;
  std::vector<ShmMeasurement> sweep;   // one receiver, other geometries
  std::string arenaExample;            // an arena name of the run, to show where the segments live
  std::uint64_t availableMemoryBytes = 0;
  std::string hugePages;               // transparent huge page modes, for anonymous memory and for shm
  double othersCpuShare = 0;           // of all CPU time during the run, used by other processes
};

// Progress lines go to `progress`; failures throw BenchFailure after the receivers are stopped.
ShmResults measureShm(const ShmBenchConfig& config, std::ostream& progress);

}  // namespace wsync::bench
