#pragma once
// How a run ends early: BenchFailure (a tool, not a hot path), unwinding to the runner while destructors stop the
// agents. Ctrl-C only records the signal; the blocking calls fail with EINTR and the run unwinds the same way.
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <tl/expected.hpp>

namespace wsync::bench {

class BenchFailure : public std::runtime_error {
 public:
  explicit BenchFailure(const std::string& what) : std::runtime_error(what) {}
};

// The value of a bus call's result, or BenchFailure naming `what` and the error (a Failure, or a message).
template <typename T, typename E>
T orThrow(tl::expected<T, E>&& result, std::string_view what) {
  if (!result) {
    if constexpr (std::is_convertible_v<E, std::string>) {
      throw BenchFailure(std::string(what) + ": " + result.error());
    } else {
      throw BenchFailure(std::string(what) + ": " + result.error().describe());
    }
  }
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}

// Whether Ctrl-C or SIGTERM arrived; throwIfInterrupted runs between blocks of work and inside every bounded wait.
bool interrupted();
void throwIfInterrupted();

}  // namespace wsync::bench
