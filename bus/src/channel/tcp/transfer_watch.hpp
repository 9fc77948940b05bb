#pragma once
// How a side of a tcp transfer waits: in slices of kPollSlice at most, asking the cancel probe and the deadline
// between slices (channel.hpp, "Cancellation"), so that an ended round costs about a millisecond and a dead peer
// never a hang.
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus::tcp {

// The longest one wait lasts before the probe and the deadline are asked again. poll() counts in milliseconds, and
// a millisecond is what the other channels' probes answer within too.
inline constexpr std::chrono::milliseconds kPollSlice{1};

class TransferWatch {
 public:
  using Clock = std::chrono::steady_clock;

  TransferWatch(std::uint64_t transfer, Clock::time_point deadline, const std::function<bool()>& cancelled)
      : transfer_(transfer), deadline_(deadline), cancelled_(cancelled) {}

  // Aborted once the probe says the round ended, Timeout past the deadline; `what` is what was being done. Asks the
  // probe at most once a slice, so it is cheap to call between every two chunks.
  tl::expected<void, ChannelFailure> check(std::string_view what);
  // poll() for at most one slice (less when the deadline is nearer), then check(). The number of ready fds.
  tl::expected<int, ChannelFailure> poll(std::span<pollfd> fds, std::string_view what);
  // Waits `duration` in slices, checking after each (a receiver waiting to connect again).
  tl::expected<void, ChannelFailure> sleep(Clock::duration duration, std::string_view what);

 private:
  std::uint64_t transfer_;
  Clock::time_point deadline_;
  const std::function<bool()>& cancelled_;
  Clock::time_point nextProbe_{};
};

}  // namespace wsync::bus::tcp
