#include "wsync/bus/bus_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace wsync::bus {

tl::expected<BusLock, ControlBlockFailure> BusLock::acquire(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return fail(ControlBlockError::SystemError, path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) return fail(ControlBlockError::BusInUse, path + " is locked");
    return fail(ControlBlockError::SystemError, path + ": " + std::strerror(error));
  }
  return BusLock(fd);
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
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace wsync::bus
