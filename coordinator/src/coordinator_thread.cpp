#include "wsync/coordinator/coordinator_thread.hpp"

#include <stdexcept>
#include <string>

namespace wsync::coordinator {

namespace {

std::unique_ptr<coordinator::Coordinator> startOrThrow(const coordinator::CoordinatorOptions& options) {
  auto started = coordinator::Coordinator::start(options);
  if (!started) throw std::runtime_error("coordinator for bus " + options.bus + ": " + started.error().describe());
  return std::move(*started);
}

}  // namespace

CoordinatorThread::CoordinatorThread(const coordinator::CoordinatorOptions& options)
    : CoordinatorThread(startOrThrow(options)) {}

CoordinatorThread::CoordinatorThread(std::unique_ptr<coordinator::Coordinator> coordinator)
    : coordinator_(std::move(coordinator)) {
  // Thread creation orders the coordinator's construction before its first step, which ZeroMQ requires of a socket
  // that changes threads.
  thread_ = std::thread([this] { coordinator_->run(stop_); });
}

CoordinatorThread::~CoordinatorThread() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();  // within one step of the loop (Coordinator::run: 100 ms)
}

}  // namespace wsync::coordinator
