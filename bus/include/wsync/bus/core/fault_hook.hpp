#pragma once
// The one way test faults reach the roles (docs/faults.md). Each role calls its hook at the points of a round, and
// the agents' payload endpoints open every channel through it; a program started with `--fault` installs one that
// strikes (tools/cli: wsync::cli::FaultInjector), and the fault matrix (tests/faults) starts the programs that way.
// Without a hook nothing happens: the roles hold no fault logic of their own, only these calls.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace wsync::bus {

// channel/channel.hpp. Only named here: core/ is below channel/ and must not depend on it.
class Channel;

// The phases of docs/update-round.md. Where each role's point lies is in docs/faults.md.
enum class FaultPoint : std::uint8_t { Begin, Pause, Transfer, Verify, Commit, Resume };

std::string_view toString(FaultPoint point);

class FaultHook {
 public:
  virtual ~FaultHook() = default;
  // Whether a fault waits at `point` of the round of `version` (a trainer, which takes no part in the pause, then
  // waits until the coordinator is in it before it calls reached()).
  virtual bool armedAt(FaultPoint point, std::uint64_t version) const = 0;
  // The role reached `point` of the round of `version`. The hook may kill or stop the process, or hold the calling
  // thread; it returns an outage when the caller must drop its connection for that long.
  virtual std::optional<std::chrono::milliseconds> reached(FaultPoint point, std::uint64_t version) = 0;
  // An agent's payload endpoint just opened `channel`: a hook may replace it with a decorator of it that spoils what
  // it moves (tools/cli: corrupt-receive). In and out through one reference, so that the default, which leaves it
  // alone, neither creates nor destroys a channel and this header needs Channel declared only.
  virtual void decorateChannel(std::unique_ptr<Channel>& /*channel*/) {}
};

// What the roles call: nothing without a hook.
inline std::optional<std::chrono::milliseconds> reachFault(FaultHook* hook, FaultPoint point, std::uint64_t version) {
  return hook != nullptr ? hook->reached(point, version) : std::nullopt;
}

}  // namespace wsync::bus
