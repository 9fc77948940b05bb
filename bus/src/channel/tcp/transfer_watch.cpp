#include "channel/tcp/transfer_watch.hpp"

#include <algorithm>
#include <cerrno>
#include <string>
#include <thread>

#include "channel/tcp/tcp_socket.hpp"

namespace wsync::bus::tcp {

tl::expected<void, ChannelFailure> TransferWatch::check(std::string_view what) {
  const auto now = Clock::now();
  if (now >= nextProbe_) {
    nextProbe_ = now + kPollSlice;
    if (cancelled_ && cancelled_()) {
      return fail(ChannelError::Aborted,
                  "transfer " + std::to_string(transfer_) + " cancelled while " + std::string(what));
    }
  }
  if (now >= deadline_) return fail(ChannelError::Timeout, "timed out while " + std::string(what));
  return {};
}

tl::expected<int, ChannelFailure> TransferWatch::poll(std::span<pollfd> fds, std::string_view what) {
  const auto left = deadline_ - Clock::now();
  // Rounded up: a wait of 0 ms would spin until the deadline.
  const auto sliceMs =
      std::clamp<std::int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), 0, kPollSlice.count());
  const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(sliceMs));
  if (ready < 0 && errno != EINTR) {
    return fail(ChannelError::SystemError, "poll while " + std::string(what) + ": " + systemText(errno));
  }
  if (auto ok = check(what); !ok) return tl::unexpected(ok.error());
  return ready < 0 ? 0 : ready;
}

tl::expected<void, ChannelFailure> TransferWatch::sleep(Clock::duration duration, std::string_view what) {
  const auto until = Clock::now() + duration;
  while (true) {
    if (auto ok = check(what); !ok) return ok;
    const auto now = Clock::now();
    if (now >= until) return {};
    std::this_thread::sleep_for(std::min<Clock::duration>(kPollSlice, until - now));
  }
}

}  // namespace wsync::bus::tcp
