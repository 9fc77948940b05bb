#include "pause_watch.hpp"

namespace wsync::worker_agent::detail {

PauseWatch::PauseWatch(std::shared_ptr<const bus::BusView> view, std::uint64_t round, msg::PauseMode mode,
                       std::function<void()> withdraw)
    : view_(std::move(view)), round_(round), mode_(mode), withdraw_(std::move(withdraw)) {
  thread_ = std::thread([this] { run(); });
}

PauseWatch::~PauseWatch() { stop(); }

bool PauseWatch::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stopping_.notify_all();
  if (thread_.joinable()) thread_.join();
  return withdrawn_.load(std::memory_order_acquire);
}

void PauseWatch::run() {
  bool seenHeld = false;
  bool seenInMode = false;  // held in the watched pause's mode
  std::unique_lock lock(mutex_);
  while (!stopping_.wait_for(lock, kPauseWatchInterval, [&] { return stop_; })) {
    const bus::PauseState word = view_->pauseState();
    const bool replaced = round_ == 0 && word.paused && seenInMode && word.mode != mode_;
    if (word.paused && !replaced) {
      seenHeld = true;
      seenInMode = seenInMode || word.mode == mode_;
    } else if (replaced || seenHeld || (round_ != 0 && word.round >= round_)) {
      lock.unlock();  // stop() may be called meanwhile; it waits for the join
      withdraw_();
      withdrawn_.store(true, std::memory_order_release);
      return;
    }
  }
}

}  // namespace wsync::worker_agent::detail
