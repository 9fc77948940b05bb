#pragma once
// The receiver processes of `wsync-bench shm` (hidden subcommand agent-shm-receive): each opens the arena, writes
// every page of its destination tensors once, says "ready" on stdout and then receives transfers 1..N in order,
// reporting each on stdout as
//   done TRANSFER BYTES DIGEST_HI DIGEST_LO FINISH_NS CPU_NS
// where FINISH_NS is steady_clock (CLOCK_MONOTONIC, one clock for every process of the machine) when receive()
// returned, so the benchmark can time a transfer until its last receiver finished without a wake-up in between, and
// CPU_NS the CPU time receive() took (its sleeps cost none).
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace wsync::bench {

struct ShmReceiverOptions {
  pid_t parent = 0;  // the benchmark; the receiver dies with it
  std::string arena;
  std::uint32_t receiver = 0;
  std::string model;        // a name cli::modelTensors knows
  std::uint64_t transfers = 0;
};

int runShmReceiver(const ShmReceiverOptions& options);

}  // namespace wsync::bench
