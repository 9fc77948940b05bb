#pragma once
// A guard for calls into NCCL that block (docs/gpu-channels.md, "Enqueueing"): a thread of its own ends a call that
// outlives the deadline, the stall timeout or a cancel by aborting the communicator the call is in. That is how a
// blocking NCCL call is ended from outside: ncclCommAbort from another thread sets the communicator's abort flag,
// which NCCL polls while it waits for peers (PyTorch's watchdog ends hung collectives the same way).
//
// Threading contract:
// - One transfer thread owns the calls. It watch()es a span of calls (one transfer's enqueue) and brackets each
//   blocking call with enter() and leave(): an atomic exchange each, no lock, no system call.
// - The guard's thread sleeps until watch(), then looks every kBlockingCallCheckInterval until unwatch().
// - It fires only while a call is inside enter()/leave(). Between calls the transfer thread makes its own checks.
//   So it calls the cancel probe only while the transfer thread is inside NCCL, never at the same time as it.
// - Once fired, the communicator is gone. leave() returns the reason, but only after the abort has finished; every
//   later enter() is refused.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus::gpu {

// How often the guard looks at a blocking call. A cancel is seen within this. It is short against the first
// broadcast, which connects the ranks (tens of milliseconds), and costs nothing between transfers (no looks then).
inline constexpr std::chrono::milliseconds kBlockingCallCheckInterval{1};

class BlockingCallGuard {
 public:
  using Clock = std::chrono::steady_clock;

  // `abortCommunicator` is called from the guard's thread, at most once.
  explicit BlockingCallGuard(std::function<void()> abortCommunicator);
  ~BlockingCallGuard();
  BlockingCallGuard(const BlockingCallGuard&) = delete;
  BlockingCallGuard& operator=(const BlockingCallGuard&) = delete;

  // The limits of the calls until unwatch(). `cancel` (may be empty) must outlive that.
  void watch(Clock::time_point deadline, Clock::duration stallTimeout, const std::function<bool()>* cancel);
  void unwatch();

  // Before a blocking call named `call` (a string literal). False once the guard has fired: make no call.
  bool enter(const char* call);
  // After the call: empty when it returned by itself, else why the guard aborted it. The abort has then finished.
  std::optional<ChannelFailure> leave();

  bool fired() const;

 private:
  // The word the transfer and guard threads hand calls over with: a call's sequence number and its state, so that
  // the guard never aborts a call later than the one it judged.
  enum State : std::uint64_t { Idle = 0, InCall = 1, Firing = 2, Fired = 3 };
  static constexpr std::uint64_t kStateBits = 2;
  static constexpr std::uint64_t kStateMask = (1u << kStateBits) - 1;

  void run();
  std::optional<ChannelFailure> verdict(Clock::time_point callStarted, const char* call) const;

  std::function<void()> abortCommunicator_;
  std::atomic<std::uint64_t> call_{Idle};
  std::atomic<Clock::rep> callStarted_{0};
  std::atomic<const char*> callName_{""};

  mutable std::mutex mutex_;
  std::condition_variable wake_;     // the guard: watched, or stopping
  std::condition_variable aborted_;  // leave(): the abort finished
  bool watched_ = false;
  bool stopping_ = false;
  Clock::time_point deadline_{};
  Clock::duration stallTimeout_{};
  const std::function<bool()>* cancel_ = nullptr;
  std::optional<ChannelFailure> failure_;  // set when fired, under mutex_
  std::thread thread_;                     // last: started once everything above exists
};

}  // namespace wsync::bus::gpu
