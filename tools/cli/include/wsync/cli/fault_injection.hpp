#pragma once
// Test-only faults, taken by the three programs as `--fault ACTION@POINT:VERSION[+MS]`: a process strikes itself at
// one exact point of the round of one version, so the fault-injection suite (tests/faults, docs/faults.md) reaches
// every phase deterministically instead of hoping that a signal sent from outside lands in it. And
// `--fault corrupt-receive@VERSION`: a receiver (wsync-worker) spoils the payload it receives for that version
// (corrupting_channel.hpp); a program that receives no payload takes it and nothing happens.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/core/fault_hook.hpp"

namespace wsync::cli {

using bus::FaultPoint;

enum class FaultAction : std::uint8_t {
  Kill,            // SIGKILL on itself: a crash, nothing cleaned up
  Stop,            // SIGSTOP on itself: frozen until someone sends SIGCONT (or SIGKILL)
  Disconnect,      // drops its control connection and stays silent for the outage, then reconnects
  Delay,           // holds the calling thread for the outage: a slow process, to widen a phase
  CorruptReceive,  // spoils what its receive of the version brought (point Transfer): a bit flip in transit
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

// "kill@transfer:3", "stop@commit:2", "disconnect@pause:4+2500", "corrupt-receive@2". The error names what is wrong.
tl::expected<FaultSpec, std::string> parseFaultSpec(std::string_view text);

// The hook a program started with --fault installs in its role (bus::FaultHook). Fires its fault once, at the first
// reached() of its point and version. Kill and Stop act inside reached() (after flushing the log, so the test sees
// why); Delay sleeps there; Disconnect is the caller's to carry out, because only it owns the connection: reached()
// hands back the outage. CorruptReceive wraps every channel the agent opens in a CorruptingChannel, which spoils
// the first receive made while the agent's round is that of the version: channels are opened once and kept across
// rounds, and a receive knows its round, not its version, so the version is the one of the last round whose Begin
// the agent reached (a worker reaches it at each round's Pause). The injector must outlive the channels it
// decorates: an agent holds its hook for its whole life.
class FaultInjector final : public bus::FaultHook {
 public:
  explicit FaultInjector(FaultSpec spec) : spec_(spec) {}

  bool armedAt(FaultPoint point, std::uint64_t version) const override {
    return spec_.point == point && spec_.version == version;
  }
  std::optional<std::chrono::milliseconds> reached(FaultPoint point, std::uint64_t version) override;
  void decorateChannel(std::unique_ptr<bus::Channel>& channel) override;

 private:
  // CorruptReceive: asked after each receive that succeeded.
  bool corruptNow();

  const FaultSpec spec_;
  std::atomic<bool> fired_{false};
  std::atomic<std::uint64_t> roundVersion_{0};  // CorruptReceive: the version of the agent's round (Begin)
};

}  // namespace wsync::cli
