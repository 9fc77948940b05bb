#include "wsync/bus/state/bus_lock.hpp"
#include "wsync/bus/core/segment_name.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::bus {
namespace {

// Contenders that asked who holds the bus wait in the listen queue until the holder's next heartbeat dismisses
// them; past this many a contender still learns that the bus is taken, only not by whom.
constexpr int kContenderBacklog = 64;

// A holder that exits, or has bound but not yet listened, between our bind and our question refuses the
// connection: bind again a few times before calling the holder unknown.
constexpr int kAcquireAttempts = 3;

// The NUL that makes the name abstract, "wsync-", the largest uid, "-" and the longest bus name fit sun_path.
static_assert(1 + 6 + 10 + 1 + kMaxBusNameBytes <= sizeof(sockaddr_un::sun_path));

struct AbstractAddress {
  sockaddr_un address{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&address); }
};

AbstractAddress abstractAddress(const std::string& name) {
  AbstractAddress result;
  result.address.sun_family = AF_UNIX;
  // sun_path[0] stays NUL: the abstract namespace, where the length, not a terminator, ends the name.
  std::memcpy(result.address.sun_path + 1, name.data(), name.size());
  result.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return result;
}

// The holder's pid and uid, as the kernel recorded them when it called listen(). Non-blocking, so that a full
// listen queue answers EAGAIN at once instead of making us wait for a holder that never accepts.
tl::expected<ucred, int> askHolder(const AbstractAddress& address) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return tl::unexpected(errno);
  int error = 0;
  ucred holder{};
  socklen_t size = sizeof holder;
  if (::connect(fd, address.get(), address.length) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &holder, &size) != 0) {
    error = errno;
  }
  ::close(fd);
  if (error != 0) return tl::unexpected(error);
  return holder;
}

std::string describeHolder(std::string_view busName, const std::string& shown, const ucred& holder) {
  const std::string bus = "bus '" + std::string(busName) + "'";
  if (holder.uid != ::geteuid()) {
    return bus + " cannot be taken: abstract socket " + shown + " is held by uid " + std::to_string(holder.uid) +
           " (pid " + std::to_string(holder.pid) + "), not by this user (uid " + std::to_string(::geteuid()) +
           "); abstract socket names are not per user";
  }
  // The kernel reports pid 0 for a holder outside our pid namespace.
  const std::string who = holder.pid > 0 ? "coordinator pid " + std::to_string(holder.pid)
                                         : std::string("a coordinator in another pid namespace");
  return bus + " is run by " + who + " (abstract socket " + shown + ")";
}

}  // namespace

std::string BusLock::socketName(std::string_view busName) { return segmentName(busName); }

tl::expected<BusLock, ControlBlockFailure> BusLock::acquire(std::string_view busName) {
  const std::string name = socketName(busName);
  const std::string shown = "@" + name;
  const AbstractAddress address = abstractAddress(name);
  int unanswered = 0;
  for (int attempt = 0; attempt < kAcquireAttempts; ++attempt) {
    // Non-blocking for dismissContenders(), which must never wait for a contender.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return fail(ControlBlockError::SystemError, "socket for " + shown + ": " + std::strerror(errno));
    if (::bind(fd, address.get(), address.length) == 0) {
      if (::listen(fd, kContenderBacklog) == 0) return BusLock(fd);
      const int error = errno;
      ::close(fd);
      return fail(ControlBlockError::SystemError, "listen on " + shown + ": " + std::strerror(error));
    }
    const int error = errno;
    ::close(fd);
    if (error != EADDRINUSE) {
      return fail(ControlBlockError::SystemError, "bind " + shown + ": " + std::strerror(error));
    }
    auto holder = askHolder(address);
    if (holder) return fail(ControlBlockError::BusInUse, describeHolder(busName, shown, *holder));
    unanswered = holder.error();
    if (unanswered != ECONNREFUSED) break;  // a full queue stays full: asking again would not help
  }
  return fail(ControlBlockError::BusInUse, "bus '" + std::string(busName) + "' is taken: abstract socket " + shown +
                                               " is held by a process that does not say who it is (" +
                                               std::strerror(unanswered) + ")");
}

BusLock& BusLock::operator=(BusLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

BusLock::~BusLock() {
  if (fd_ >= 0) ::close(fd_);  // the last descriptor gone, the kernel frees the name
}

void BusLock::dismissContenders() {
  if (fd_ < 0) return;
  // Bounded, so that a flood of connections costs the caller at most one queue's worth of accepts per call.
  for (int dismissed = 0; dismissed <= kContenderBacklog; ++dismissed) {
    const int contender = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (contender < 0) return;  // EAGAIN: the queue is empty
    ::close(contender);
  }
}

}  // namespace wsync::bus
