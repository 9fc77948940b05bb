#pragma once
#include <string>

#include <tl/expected.hpp>

#include "wsync/bus/control_block_error.hpp"

namespace wsync::bus {

// "One coordinator per bus": an exclusive flock(2) on <runtime folder>/<bus>.lock, held while the owner lives and
// released by the kernel when it dies, however it dies. flock rather than fcntl locks (boost file_lock): fcntl
// locks are dropped when any descriptor of the file closes in the process, and never conflict within one.
class BusLock {
 public:
  static tl::expected<BusLock, ControlBlockFailure> acquire(const std::string& path);

  BusLock(BusLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  BusLock& operator=(BusLock&& other) noexcept;
  BusLock(const BusLock&) = delete;
  BusLock& operator=(const BusLock&) = delete;
  ~BusLock();

 private:
  explicit BusLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace wsync::bus
