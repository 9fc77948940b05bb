#pragma once
// An agent's copy of what the coordinator's control block says about the bus, for an agent on another host, which
// cannot map the block (docs/hosts.md). A thread of its own subscribes to the coordinator's beats ("bus/beat": every
// heartbeat interval, and at once whenever the committed version, the round's phase or the pause word changes) and
// stores each into atomics, so reads stay one load as on the coordinator's host. PUB drops at its high-water mark
// and a beat can be lost: the next one, at most a heartbeat interval later, repairs the copy.
//
// It answers what the host path answers from the block: the round's phase for a transfer's cancel probe, whether
// the coordinator lives (its beats keep coming), the committed version and pause word for engines. One per agent
// session, kept across registrations (a new coordinator's beats carry another epoch). Threading: any thread reads.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/session/bus_view.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/event_subscriber.hpp"
#include "wsync/bus/transport/transport_error.hpp"

namespace wsync::bus {

// How often the mirror's thread looks at its stop flag between beats: the longest a session's close waits for it.
inline constexpr std::chrono::milliseconds kMirrorStopPoll{50};

class BusMirror final : public BusView {
 public:
  // Subscribes to `eventsEndpoint`'s beats (as a CURVE client with `curve` where the bus requires it).
  static tl::expected<std::shared_ptr<BusMirror>, TransportFailure> start(zmq::context_t& context,
                                                                          const std::string& eventsEndpoint,
                                                                          const std::optional<CurveClient>& curve);
  ~BusMirror() override;
  BusMirror(const BusMirror&) = delete;
  BusMirror& operator=(const BusMirror&) = delete;

  // What a Welcome of `epoch` said, so that reads are right before that coordinator's first beat arrives; also
  // counts as a sign of its life.
  void seed(std::uint64_t epoch, std::uint64_t committedVersion, const PauseState& pause);

  std::uint64_t committedVersion() const override { return committed_.load(std::memory_order_acquire); }
  PauseState pauseState() const override;
  // The round as the last beat of `epoch`'s coordinator gave it; nothing when the last beat came from another one.
  std::optional<RoundState> roundState(std::uint64_t epoch) const;
  // Whether the coordinator of `epoch` beat within `timeout` (a beat of another epoch: it was replaced).
  bool coordinatorAlive(std::uint64_t epoch, std::chrono::milliseconds timeout) const;
  // Beats received: for tests and logs.
  std::uint64_t beats() const { return beats_.load(std::memory_order_relaxed); }

 private:
  BusMirror() = default;
  void run(EventSubscriber subscriber);

  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::uint64_t> roundWord_{0};  // RoundState, packed as the control block packs it
  std::atomic<std::uint64_t> pauseWord_{0};  // PauseState, likewise
  std::atomic<std::uint64_t> committed_{0};
  std::atomic<std::uint64_t> lastBeatMs_{0};  // CLOCK_MONOTONIC milliseconds of the last beat (or seed)
  std::atomic<std::uint64_t> beats_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace wsync::bus
