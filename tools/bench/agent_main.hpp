#pragma once
// The agent roles of `wsync-bench bus`, run in processes of their own (hidden subcommands). Each agent opens
// both paths, bus and raw, so that one process, with one scheduling history, serves both sides of a comparison.
#include <cstddef>
#include <string>

namespace wsync::bench {

struct AgentOptions {
  std::string id;    // routing id, the same on both paths
  std::string busRequests;
  std::string busEvents;
  std::string rawRequests;
  std::string rawEvents;
  // Round-trip role only: the schedule (shared with the coordinator).
  std::size_t iterations = 0;
  std::size_t warmup = 0;
  std::size_t block = 0;
};

// Sends requests through both paths as the schedule says, times each round trip, writes the samples on stdout as
// two lines ("bus NS NS ...", then "raw ..."), exits.
int runRoundTripAgent(const AgentOptions& options);

// Answers every Pause on either path with a PauseAck until it is stopped (SIGTERM) or nothing arrives for
// kAgentIdleTimeout.
int runPauseAgent(const AgentOptions& options);

}  // namespace wsync::bench
