#include "bench_failure.hpp"

#include <csignal>

namespace wsync::bench {
namespace {

volatile std::sig_atomic_t receivedSignal = 0;

extern "C" void recordSignal(int signalNumber) { receivedSignal = signalNumber; }

}  // namespace

void installInterruptHandlers() {
  struct sigaction action{};
  action.sa_handler = recordSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking poll or sleep must return EINTR so the run can stop
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool interrupted() { return receivedSignal != 0; }

void throwIfInterrupted() {
  if (interrupted()) throw BenchFailure("interrupted by signal " + std::to_string(receivedSignal));
}

}  // namespace wsync::bench
