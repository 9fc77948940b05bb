#pragma once
// Test-only faults, taken by the three programs as `--fault ACTION@POINT:VERSION[+MS]`: a process strikes itself at
// one exact point of the round of one version, so the fault-injection suite (tests/faults, docs/faults.md) reaches
// every phase deterministically instead of hoping that a signal sent from outside lands in it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/core/fault_hook.hpp"

namespace wsync::cli {

using bus::FaultPoint;

enum class FaultAction : std::uint8_t {
  Kill,        // SIGKILL on itself: a crash, nothing cleaned up
  Stop,        // SIGSTOP on itself: frozen until someone sends SIGCONT (or SIGKILL)
  Disconnect,  // drops its control connection and stays silent for the outage, then reconnects
  Delay,       // holds the calling thread for the outage: a slow process, to widen a phase
};

// A disconnect or delay lasts this long unless the spec says otherwise: longer than the heartbeat timeout the
// tests use (1 s), so that the coordinator declares a silent agent dead before it is back.
inline constexpr std::chrono::milliseconds kDefaultFaultOutage{3000};

struct FaultSpec {
  FaultAction action = FaultAction::Kill;
  FaultPoint point = FaultPoint::Begin;
  std::uint64_t version = 0;
  std::chrono::milliseconds outage = kDefaultFaultOutage;
};

std::string_view toString(FaultAction action);
std::string describe(const FaultSpec& spec);

// "kill@transfer:3", "stop@commit:2", "disconnect@pause:4+2500". The error names what is wrong.
tl::expected<FaultSpec, std::string> parseFaultSpec(std::string_view text);

// The hook a program started with --fault installs in its role (bus::FaultHook). Fires its fault once, at the first
// reached() of its point and version. Kill and Stop act inside reached() (after flushing the log, so the test sees
// why); Delay sleeps there; Disconnect is the caller's to carry out, because only it owns the connection: reached()
// hands back the outage.
class FaultInjector final : public bus::FaultHook {
 public:
  explicit FaultInjector(FaultSpec spec) : spec_(spec) {}

  bool armedAt(FaultPoint point, std::uint64_t version) const override {
    return spec_.point == point && spec_.version == version;
  }
  std::optional<std::chrono::milliseconds> reached(FaultPoint point, std::uint64_t version) override;

 private:
  const FaultSpec spec_;
  std::atomic<bool> fired_{false};
};

}  // namespace wsync::cli
