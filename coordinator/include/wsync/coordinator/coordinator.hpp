#pragma once
// The coordinator of one bus (docs/update-round.md): owns the endpoints, the control block and the shm arena,
// registers agents, runs update rounds and declares dead agents. One thread drives it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <tl/expected.hpp>

#include "wsync/bus/core/failure.hpp"
#include "wsync/coordinator/coordinator_options.hpp"

namespace wsync::coordinator {

enum class CoordinatorError : std::uint8_t {
  InvalidOptions,
  BusInUse,      // another coordinator runs this bus (detail names its pid)
  ControlBlock,  // the control block could not be created
  Channel,       // a payload channel's resources (the shm arena) could not be created
  Transport,     // an endpoint could not be bound
};

std::string_view toString(CoordinatorError error);
using CoordinatorFailure = bus::Failure<CoordinatorError>;

// Counters for tests and the CLI's exit summary.
struct CoordinatorStats {
  std::uint64_t roundsCommitted = 0;
  std::uint64_t roundsAborted = 0;
  std::uint64_t agentsJoined = 0;
  std::uint64_t agentsDied = 0;
  std::uint64_t requestsRejected = 0;  // malformed, unknown sender, refused
  std::uint64_t endpointResets = 0;    // the request endpoint was reset to free what its connections held
};

class Coordinator {
 public:
  static tl::expected<std::unique_ptr<Coordinator>, CoordinatorFailure> start(const CoordinatorOptions& options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Handles what arrives within `maxWait` (at least one pass over heartbeats and deadlines).
  void step(std::chrono::milliseconds maxWait);
  // Steps until `stop` is set; then aborts a running round and says goodbye on the event stream.
  void run(const std::atomic<bool>& stop);

  std::uint64_t epoch() const;
  std::uint64_t committedVersion() const;
  const CoordinatorStats& stats() const;
  std::string requestEndpoint() const;
  std::string eventEndpoint() const;

  class Impl;  // coordinator/src/coordinator_impl.hpp

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace wsync::coordinator
