#pragma once
// A coordinator in the calling process, driven by a thread of its own as wsync-coordinator's main loop drives it
// (Coordinator::run until a stop flag), so that a benchmark or a test has a fresh bus in milliseconds. Stopped and
// joined by the destructor on every exit path; the coordinator then removes its segments and socket files.
#include <atomic>
#include <memory>
#include <thread>

#include <wsync/coordinator/coordinator.hpp>

namespace wsync::coordinator {

class CoordinatorThread {
 public:
  explicit CoordinatorThread(const coordinator::CoordinatorOptions& options);  // throws std::runtime_error
  // Runs a coordinator the caller started (and could tell apart why it failed to, as the C API does).
  explicit CoordinatorThread(std::unique_ptr<coordinator::Coordinator> coordinator);
  CoordinatorThread(const CoordinatorThread&) = delete;
  CoordinatorThread& operator=(const CoordinatorThread&) = delete;
  ~CoordinatorThread();

 private:
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace wsync::coordinator
