#include "wsync/bus/channel/nccl/blocking_call_guard.hpp"

#include <string>

namespace wsync::bus::gpu {

BlockingCallGuard::BlockingCallGuard(std::function<void()> abortCommunicator)
    : abortCommunicator_(std::move(abortCommunicator)), thread_([this] { run(); }) {}

BlockingCallGuard::~BlockingCallGuard() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void BlockingCallGuard::watch(Clock::time_point deadline, Clock::duration stallTimeout,
                              const std::function<bool()>* cancel) {
  {
    std::lock_guard lock(mutex_);
    watched_ = true;
    deadline_ = deadline;
    stallTimeout_ = stallTimeout;
    cancel_ = cancel;
  }
  wake_.notify_one();
}

void BlockingCallGuard::unwatch() {
  // No notify: the guard sees it at its next look and sleeps until the next watch().
  std::lock_guard lock(mutex_);
  watched_ = false;
  cancel_ = nullptr;
}

bool BlockingCallGuard::enter(const char* call) {
  std::uint64_t word = call_.load(std::memory_order_relaxed);
  if ((word & kStateMask) != Idle) return false;
  callName_.store(call, std::memory_order_relaxed);
  callStarted_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  // Release: the guard that sees this call also sees its start and name.
  const std::uint64_t next = ((word >> kStateBits) + 1) << kStateBits | InCall;
  return call_.compare_exchange_strong(word, next, std::memory_order_release, std::memory_order_relaxed);
}

std::optional<ChannelFailure> BlockingCallGuard::leave() {
  std::uint64_t word = call_.load(std::memory_order_relaxed);
  if ((word & kStateMask) == InCall &&
      call_.compare_exchange_strong(word, (word & ~kStateMask) | Idle, std::memory_order_acq_rel)) {
    return std::nullopt;
  }
  // The guard took this call: wait for its abort to finish, so that nothing touches the communicator before.
  std::unique_lock lock(mutex_);
  aborted_.wait(lock, [this] { return (call_.load(std::memory_order_acquire) & kStateMask) == Fired; });
  return failure_;
}

bool BlockingCallGuard::fired() const {
  const std::uint64_t state = call_.load(std::memory_order_acquire) & kStateMask;
  return state == Firing || state == Fired;
}

std::optional<ChannelFailure> BlockingCallGuard::verdict(Clock::time_point callStarted, const char* call) const {
  const auto now = Clock::now();
  if (now > deadline_) return ChannelFailure{ChannelError::Timeout, std::string(call) + " did not complete in time"};
  if (cancel_ != nullptr && *cancel_ && (*cancel_)()) {
    return ChannelFailure{ChannelError::Aborted, std::string("cancelled in ") + call};
  }
  if (now - callStarted > stallTimeout_) {
    return ChannelFailure{
        ChannelError::Timeout,
        std::string(call) + " made no progress for " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(stallTimeout_).count()) +
            " ms: a peer is dead or stuck"};
  }
  return std::nullopt;
}

void BlockingCallGuard::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (!watched_) {
      wake_.wait(lock, [this] { return watched_ || stopping_; });
      continue;
    }
    std::uint64_t word = call_.load(std::memory_order_acquire);
    if ((word & kStateMask) == InCall) {
      const Clock::time_point started{Clock::duration{callStarted_.load(std::memory_order_relaxed)}};
      const char* call = callName_.load(std::memory_order_relaxed);
      // Fires only if the call judged is still the one in progress (not returned, no later one begun).
      if (auto failure = verdict(started, call);
          failure && call_.compare_exchange_strong(word, (word & ~kStateMask) | Firing, std::memory_order_acq_rel)) {
        failure_ = std::move(failure);
        abortCommunicator_();
        call_.store((word & ~kStateMask) | Fired, std::memory_order_release);
        aborted_.notify_all();
        watched_ = false;
        continue;
      }
    }
    wake_.wait_for(lock, kBlockingCallCheckInterval, [this] { return stopping_; });
  }
}

}  // namespace wsync::bus::gpu
