#pragma once
#include <stdexcept>
#include <string>

namespace wsync::bench {

// A measurement that cannot go on (a peer died, a wait ran out, a message was wrong). The benchmark is a tool,
// not a hot path of the product: failures unwind to main, and destructors stop and reap the agent processes.
class BenchFailure : public std::runtime_error {
 public:
  explicit BenchFailure(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace wsync::bench
