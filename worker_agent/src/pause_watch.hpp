#pragma once
// Watches the bus while an engine's pause hook runs, and says when the bus no longer wants the pause. The hooks run
// on the agent's I/O thread, so without it a pause that is called off (the round aborted, say by the pause timeout
// this very drain ran past, or by an operator; an operator's pause lifted) would reach the agent only once the
// engine had quiesced, which in `wait` mode takes as long as the longest request in flight.
//
// It reads the bus's pause word (BusView: the control block, or on another host the mirror of the coordinator's
// beats), which the coordinator sets before it sends a Pause and clears when the round ends, keeping the round's
// number. The pause counts as withdrawn once the word is clear and was seen held, or is clear and names the round
// paused for or a later one: a mirror that has not heard of the pause yet says nothing. An operator's pause also
// counts as withdrawn once the word, seen held in its mode, is held in another: while an operator's pause holds the
// word keeps its mode, so another mode is a pause that replaced it (a round that began as the operator resumed,
// quicker than the watch looks; or the operator's pause again, in a new mode), which the agent must pause the engine
// for itself. A word held in the same mode, or held for a later round while a round's pause is watched, keeps the
// engine quiescing for that one.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "wsync/bus/session/bus_view.hpp"

namespace wsync::worker_agent::detail {

// How often the watch reads the pause word: a drain worth calling off lasts seconds, and one atomic load every
// 10 ms costs nothing.
inline constexpr std::chrono::milliseconds kPauseWatchInterval{10};

class PauseWatch {
 public:
  // Starts watching `view` for the pause of `round` (0: an operator's) in `mode` on a thread of its own; `withdraw`
  // is called there, at most once.
  PauseWatch(std::shared_ptr<const bus::BusView> view, std::uint64_t round, msg::PauseMode mode,
             std::function<void()> withdraw);
  ~PauseWatch();
  PauseWatch(const PauseWatch&) = delete;
  PauseWatch& operator=(const PauseWatch&) = delete;

  // Stops watching (joins the thread, so `withdraw` has returned) and says whether it was called.
  bool stop();

 private:
  void run();

  const std::shared_ptr<const bus::BusView> view_;
  const std::uint64_t round_;
  const msg::PauseMode mode_;
  const std::function<void()> withdraw_;
  std::mutex mutex_;
  std::condition_variable stopping_;
  bool stop_ = false;  // guarded by mutex_
  std::atomic<bool> withdrawn_{false};
  std::thread thread_;
};

}  // namespace wsync::worker_agent::detail
