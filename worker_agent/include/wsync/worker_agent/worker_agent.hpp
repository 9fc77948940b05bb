#pragma once
// The worker side of an update round (docs/update-round.md), linked into an inference engine: it registers with
// the coordinator, checks each round's manifest against the engine's bindings, pauses the engine through
// PauseHooks, receives the payload into staging buffers, applies a version only when the coordinator commits the
// digest it staged, and exposes the applied version for tagging outputs.
//
// Threading: start() spawns one I/O thread that owns the bus session and runs every round, transfers included
// (plus the session's heartbeat thread, which only writes the shared-memory heartbeat word). Hooks run on the I/O
// thread, one at a time, and must not throw. appliedVersion(), committedVersion(), pauseRequested(), rank() and
// counters() are safe from any thread, waitForVersion() from any thread but a hook. stop() may be called from any
// thread but a hook; it returns once the I/O thread has ended, so a hook in progress must return (close the
// PauseGate first when the engine has stopped) and a receive in progress must end (it does when the trainer
// finishes or the coordinator aborts it).
//
// Memory: staging holds one full copy of the model (sum of the bound tensors' bytes), allocated at the first
// transfer and reused for every round after. The payload arena adds nothing here: it lives in shared memory owned
// by the coordinator (buffer count x bucket size).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/session/agent_session.hpp"
#include "wsync/bus/state/control_block.hpp"
#include "wsync/worker_agent/worker_error.hpp"
#include "wsync/worker_agent/worker_options.hpp"

namespace wsync::worker_agent {

struct WorkerCounters {
  std::uint64_t roundsApplied = 0;    // versions copied into the bindings
  std::uint64_t roundsAborted = 0;    // rounds the coordinator aborted while this worker took part
  std::uint64_t roundsRefused = 0;    // pauses refused (manifest mismatch) and commits not applied
  std::uint64_t transfersFailed = 0;  // receives that failed (channel failure, abort, timeout)
};

// What WorkerAgent::waitForVersion saw.
enum class VersionWait : std::uint8_t {
  Reached,   // the applied version is at least the one asked for
  TimedOut,  // not within the timeout
  Stopped,   // the agent stopped first
};

namespace detail {
class BindingClaim;
class RoundHandler;

// The applied version: stored by the I/O thread after each apply and read by anyone with one atomic load; waited
// for by waitForVersion, which sees a version once its apply is complete (counters, applied hook) and wakes when
// the agent stops.
class AppliedVersion {
 public:
  std::uint64_t load() const { return version_.load(std::memory_order_acquire); }
  void store(std::uint64_t version) { version_.store(version, std::memory_order_release); }
  // The stored version's apply is complete: waiters for it return.
  void wakeWaiters();
  // Wakes every waiter for good.
  void close();
  VersionWait waitFor(std::uint64_t version, std::chrono::milliseconds timeout) const;

 private:
  std::atomic<std::uint64_t> version_{0};
  mutable std::mutex mutex_;  // orders a wake or close against a waiter's check, so no wake-up is lost
  mutable std::condition_variable changed_;
  std::uint64_t complete_ = 0;  // guarded by mutex_: the last version whose apply is complete
  bool closed_ = false;         // guarded by mutex_
};
}  // namespace detail

class WorkerAgent {
 public:
  // Validates the options, claims the bound memory for this worker (refused, InvalidBinding, when another live
  // worker agent of this process bound any of it: the detail names both tensors and the other agent), registers
  // (blocking, up to options.registrationTimeout) and starts the I/O thread.
  static tl::expected<std::unique_ptr<WorkerAgent>, WorkerFailure> start(WorkerOptions options, PauseHooks hooks);

  ~WorkerAgent();  // stop()
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // The version the bound buffers hold: one atomic load, lock-free, for tagging every generated token.
  std::uint64_t appliedVersion() const { return appliedVersion_.load(); }
  // Waits until the applied version is at least `version` and its apply is complete (counted, the applied hook
  // returned): Reached at once when it is already; TimedOut; Stopped once stop() began. Any thread but a hook's (the
  // I/O thread applies versions).
  VersionWait waitForVersion(std::uint64_t version, std::chrono::milliseconds timeout) const {
    return appliedVersion_.waitFor(version, timeout);
  }
  // The bus's committed version, from the coordinator's shared-memory control block (takes a mutex: the mapping
  // is replaced when the coordinator restarts; tag outputs with appliedVersion() instead).
  std::uint64_t committedVersion() const;
  // Whether the bus asks engines to pause now, in which mode and for which round (0: an operator's pause): the
  // control block's pause word, which the coordinator stores before it sends any Pause. An engine that polls it
  // between steps can stop admitting requests as soon as a round begins, before its pause hook is called. Same
  // cost as committedVersion(); the hooks remain what the round waits for.
  bus::PauseState pauseRequested() const;
  // The rank the coordinator granted (it may change when the agent registers again with a restarted coordinator).
  std::int32_t rank() const { return rank_.load(std::memory_order_acquire); }
  const std::string& agentId() const { return agentId_; }
  WorkerCounters counters() const;

  // Joins the I/O thread, says Goodbye (the coordinator frees the slot at once) and releases the bound memory to
  // other workers of this process. Idempotent.
  void stop();

 private:
  WorkerAgent() = default;
  void run();  // the I/O thread

  detail::AppliedVersion appliedVersion_;
  std::atomic<std::int32_t> rank_{-1};
  std::atomic<bool> stopping_{false};
  std::string agentId_;
  std::unique_ptr<detail::BindingClaim> bindingClaim_;  // this worker's hold on its bound memory, until stop()
  zmq::context_t context_{1};
  std::unique_ptr<bus::AgentSession> session_;  // after context_: its socket must close before the context ends
  std::unique_ptr<detail::RoundHandler> rounds_;
  std::thread ioThread_;
  std::once_flag stopOnce_;
};

}  // namespace wsync::worker_agent
