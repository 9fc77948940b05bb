#pragma once
// Test support: what a process that should have ended is doing, for the failure message of a test that waited in
// vain (a hang seen once on CI is otherwise all but impossible to explain afterwards).
#include <sys/types.h>

#include <string>

namespace wsync::test {

// Every thread's stack from gdb where gdb is installed (it attaches for a moment); otherwise each thread's name,
// state, kernel wait channel and system call from /proc.
std::string describeStuckProcess(pid_t pid);

}  // namespace wsync::test
