#pragma once
// The bridge between WorkerAgent's pause hook and an engine's step loop.
//
// Threading contract:
//  - pause(), resume() are called by the agent side, one call at a time (in practice the agent's I/O thread, from
//    PauseHooks). pause() blocks until the engine has parked, the pause is withdrawn, or the gate is closed.
//  - withdraw() is called by the agent side while pause() blocks (PauseHooks::withdraw, the agent's watch thread):
//    the bus no longer wants the pause, so an engine still quiescing goes back to generating.
//  - requested() and park() are called by the engine side, one thread (the step loop). requested() is one atomic
//    load, cheap enough for every step; park() blocks until resume() or close().
//  - close() may be called from any thread, any number of times. Once closed, pause() and park() return at once:
//    an engine that has stopped generating is quiesced by definition, and an agent waiting on it must not hang.
//
// The engine decides what each mode means for its requests before it parks: Abort ends in-flight requests, Wait
// admits nothing new and parks once the in-flight ones are done, Keep parks at once with its requests frozen.
// Everything the engine wrote before park() happens-before pause() returns, and everything the agent wrote before
// resume() (the new weights) happens-before park() returns.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

#include <wsync/schemas/control_generated.h>

namespace wsync::worker_agent {

class PauseGate {
 public:
  // Agent side: asks the engine to quiesce in `mode` and waits until it parks. Returns at once when the engine is
  // already parked or the gate is closed. True when it parked (or the gate is closed); false when withdraw() came
  // first: the request is gone and the engine goes on generating, so it must not be resumed.
  bool pause(msg::PauseMode mode);
  // Agent side, any thread: takes back a pause the engine has not parked for yet (requested() is empty again, and
  // pause() returns false). Nothing once the engine has parked: the agent then resumes it as usual.
  void withdraw();
  // Agent side: releases a parked engine and clears the request.
  void resume();

  // Engine side: the pause the agent is waiting for, if any.
  std::optional<msg::PauseMode> requested() const;
  // Engine side: declares the engine quiesced and waits for resume(). True when resumed, false when the gate was
  // closed (the engine should stop). Returns true at once when the pause the engine last read from requested() was
  // withdrawn since: there is nothing to park for, and the agent is not waiting.
  bool park();

  // No more pausing: wakes pause() and park() for good.
  void close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // Whether the engine is parked and not yet released (for tests and monitors).
  bool parked() const;

 private:
  // 0: nothing requested; else 1 + the PauseMode, so one load tells both.
  std::atomic<std::uint32_t> request_{0};
  std::atomic<bool> closed_{false};
  // A withdraw() the engine has not seen yet: set before request_ is cleared, so an engine that reads the cleared
  // request sees it too (and clears it); one that read the request before parks for nothing, and park() says so.
  mutable std::atomic<bool> withdrawnUnseen_{false};
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool parked_ = false;            // guarded by mutex_
  std::uint64_t resumes_ = 0;      // guarded by mutex_; park() waits for it to move
  std::uint64_t withdrawals_ = 0;  // guarded by mutex_; pause() returns when it moves
};

}  // namespace wsync::worker_agent
