#include "wsync/worker_agent/pause_gate.hpp"

namespace wsync::worker_agent {

bool PauseGate::pause(msg::PauseMode mode) {
  std::unique_lock lock(mutex_);
  if (closed_.load(std::memory_order_acquire) || parked_) return true;
  const std::uint64_t withdrawalsBefore = withdrawals_;
  withdrawnUnseen_.store(false, std::memory_order_relaxed);  // a new request: whatever the engine read, park for it
  request_.store(1U + static_cast<std::uint32_t>(mode), std::memory_order_release);
  changed_.wait(
      lock, [&] { return parked_ || closed_.load(std::memory_order_acquire) || withdrawals_ != withdrawalsBefore; });
  return parked_ || closed_.load(std::memory_order_acquire);
}

void PauseGate::withdraw() {
  {
    std::lock_guard lock(mutex_);
    if (parked_ || request_.load(std::memory_order_acquire) == 0) return;
    withdrawnUnseen_.store(true, std::memory_order_relaxed);  // published by the release below
    request_.store(0, std::memory_order_release);
    ++withdrawals_;
  }
  changed_.notify_all();
}

void PauseGate::resume() {
  {
    std::lock_guard lock(mutex_);
    request_.store(0, std::memory_order_release);
    ++resumes_;
    // Released now, not when the engine thread gets to run: a pause() right after this must wait for the engine
    // to park again rather than take the old park for a new one.
    parked_ = false;
  }
  changed_.notify_all();
}

std::optional<msg::PauseMode> PauseGate::requested() const {
  const std::uint32_t word = request_.load(std::memory_order_acquire);
  if (word == 0) {
    // The engine has now seen any withdrawal: a park() of its own after this waits as ever.
    if (withdrawnUnseen_.load(std::memory_order_relaxed)) withdrawnUnseen_.store(false, std::memory_order_relaxed);
    return std::nullopt;
  }
  return static_cast<msg::PauseMode>(word - 1U);
}

bool PauseGate::park() {
  std::unique_lock lock(mutex_);
  if (closed_.load(std::memory_order_acquire)) return false;
  // Withdrawn between the engine's requested() and this call: the agent is not waiting, and would never resume it.
  if (withdrawnUnseen_.load(std::memory_order_relaxed)) {
    withdrawnUnseen_.store(false, std::memory_order_relaxed);
    return true;
  }
  const std::uint64_t resumesBefore = resumes_;
  parked_ = true;
  changed_.notify_all();  // the agent's pause() waits for this
  changed_.wait(lock, [&] { return resumes_ != resumesBefore || closed_.load(std::memory_order_acquire); });
  return resumes_ != resumesBefore;
}

void PauseGate::close() {
  {
    std::lock_guard lock(mutex_);
    closed_.store(true, std::memory_order_release);
    request_.store(0, std::memory_order_release);
    parked_ = false;
  }
  changed_.notify_all();
}

bool PauseGate::parked() const {
  std::lock_guard lock(mutex_);
  return parked_;
}

}  // namespace wsync::worker_agent
