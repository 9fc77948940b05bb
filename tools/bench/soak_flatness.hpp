#pragma once
// The soak's verdicts: is the last window like the first after the warm-up (both without restarts)? Rounds/s and
// round-time percentiles within +-10%; RSS, open fds and threads of every process, the bus's /dev/shm segments and
// runtime files and the child processes no higher than the first window's maximum plus a small tolerance. And the
// health of the run: every aborted round caused by a restart, no worker ending by itself.
#include <string>
#include <vector>

#include "soak_benchmark.hpp"

namespace wsync::bench {

struct SoakCheck {
  std::string figure;  // "rounds/s", "coordinator RSS (MiB)", ...
  double first = 0;    // the first window after the warm-up (RSS, fds and counts: its maximum)
  double last = 0;     // the last window (likewise)
  double ratio = 0;    // last / first; 0 when first is 0
  std::string goal;    // in words, with the limit
  bool met = false;
  bool better = false;  // missed, but on the good side (faster, fewer): the machine changed, not the bus
};

std::vector<SoakCheck> flatnessChecks(const SoakResults& results);
std::vector<SoakCheck> healthChecks(const SoakResults& results);

}  // namespace wsync::bench
