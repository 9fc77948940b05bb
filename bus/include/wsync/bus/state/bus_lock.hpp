#pragma once
// "One coordinator per bus on this host": the coordinator binds the abstract unix socket "@wsync-<euid>-<bus>"
// (docs/control-block.md). An abstract name has no file: nobody can unlink it, it does not depend on the runtime
// folder, and the kernel releases it when the last descriptor closes, however the process ends. The socket
// listens so that a contender can connect and read SO_PEERCRED to name the holder's pid and uid.
//
// Abstract names are per network namespace: that is what "host" means for this lock (and for the tests, which
// stand in for hosts with network namespaces). They are not per user: another user can bind ours first
// (squatting); acquire() then says which uid holds it, since we cannot take it.
//
// Threading: one thread uses a BusLock (the coordinator's control thread); acquire() may run on any thread.
#include <cstdint>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/state/control_block_error.hpp"

namespace wsync::bus {

class BusLock {
 public:
  // Takes `busName` (already validated) for this process; BusInUse names the holder's pid, or its uid when it
  // belongs to another user. The socket is close-on-exec: a program this process starts does not hold the bus.
  static tl::expected<BusLock, ControlBlockFailure> acquire(std::string_view busName);

  // The abstract name for `busName` without its leading NUL, "wsync-<euid>-<bus>"; shown as "@wsync-<euid>-<bus>".
  static std::string socketName(std::string_view busName);

  BusLock(BusLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  BusLock& operator=(BusLock&& other) noexcept;
  BusLock(const BusLock&) = delete;
  BusLock& operator=(const BusLock&) = delete;
  ~BusLock();

  // Accepts and closes the connections of contenders that asked who holds the bus (nobody else connects): they
  // wait in the listen queue until accepted, and a full queue would leave the next contender without our pid.
  // Never blocks; called with the owner's heartbeat.
  void dismissContenders();

 private:
  explicit BusLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace wsync::bus
