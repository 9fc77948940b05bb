#pragma once
// Test support: a short program run to its end with what it printed (rig.sh's commands, wsync-ctl, a probe run on a
// rig host), where a test needs the output and the exit status together.
#include <chrono>
#include <string>
#include <vector>

namespace wsync::test {

struct CapturedRun {
  // The exit status (128 + the signal when killed); kTimedOut when it was still running at the timeout.
  static constexpr int kTimedOut = -1;
  int status = kTimedOut;
  std::string out;
  std::string err;

  // "exited with status 3: <its stderr>", for assertion messages.
  std::string describe() const;
};

// Runs argv[0] with argv[1..] and collects its stdout and stderr until it ends, or until `timeout` has passed: then
// it is killed and its status is CapturedRun::kTimedOut. One that cannot be started at all: status 127, the reason in
// `err`.
CapturedRun runToEnd(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace wsync::test
