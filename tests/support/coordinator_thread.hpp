#pragma once
// A real coordinator in the test's process, stepped on its own thread (tests that link wsync::coordinator).
#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>

#include "wsync/coordinator/coordinator.hpp"

namespace wsync::test {

class CoordinatorThread {
 public:
  explicit CoordinatorThread(const coordinator::CoordinatorOptions& options) {
    auto started = coordinator::Coordinator::start(options);
    if (!started) throw std::runtime_error(started.error().describe());
    coordinator_ = std::move(*started);
    thread_ = std::thread([this] { coordinator_->run(stop_); });
  }
  ~CoordinatorThread() {
    stop_.store(true);
    thread_.join();
  }
  CoordinatorThread(const CoordinatorThread&) = delete;
  CoordinatorThread& operator=(const CoordinatorThread&) = delete;

 private:
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace wsync::test
