#pragma once
// Whether the coordinator that owns a control block is gone, asked by the agents' cancel probes from the wait loops
// of a transfer (a dead coordinator can abort nothing, docs/faults.md). The nccl channel polls every 100 us and a
// process check is a syscall plus a /proc read, so the answer is kept for kCoordinatorCheckInterval.
#include <chrono>

namespace wsync::bus {

// Short against any transfer deadline, long against the polling of a wait loop.
inline constexpr std::chrono::milliseconds kCoordinatorCheckInterval{50};

// One per waiting thread (not thread-safe).
class CoordinatorWatch {
 public:
  // `state`: anything that can say whether its coordinator lives (a ControlBlockView, a bus::AgentSlot).
  template <typename CoordinatorState>
  bool gone(const CoordinatorState& state) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= nextCheck_) {
      gone_ = !state.coordinatorAlive();
      nextCheck_ = now + kCoordinatorCheckInterval;
    }
    return gone_;
  }

 private:
  std::chrono::steady_clock::time_point nextCheck_{};
  bool gone_ = false;
};

}  // namespace wsync::bus
