#pragma once
// Ctrl-C and SIGTERM end a run cleanly: the handler only records the signal, the blocking calls it interrupts
// fail with EINTR, and the run unwinds through the destructors that stop agents and remove sockets and segments.

namespace wsync::bench {

void installInterruptHandlers();
bool interrupted();
// Throws BenchFailure when a signal arrived; called between blocks of work and inside every bounded wait.
void throwIfInterrupted();

}  // namespace wsync::bench
