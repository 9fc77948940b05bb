#pragma once
// The worker role of `wsync-bench round`, run in a process of its own (hidden subcommand `agent-round-worker`):
// a real WorkerAgent bound to a model's tensors, in front of an idle engine whose pause hook returns at once, so
// that a round costs this process only what the agent itself does.
#include <sys/types.h>

#include <string>

namespace wsync::bench {

struct RoundWorkerOptions {
  pid_t parent = 0;   // the benchmark; the worker dies with it
  std::string bus;    // the benchmark's coordinator
  std::string id;     // agent id
  std::string model;  // a name cli::modelTensors knows: the tensors to bind, the trainer's manifest
};

// Registers, then serves rounds until SIGTERM (stops the agent: Goodbye, exit 0) or until no round has paused it
// for kAgentIdleTimeout (the benchmark is stuck: exit 2).
int runRoundWorker(const RoundWorkerOptions& options);

}  // namespace wsync::bench
