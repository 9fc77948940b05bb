#include "wsync/cli/fault_injection.hpp"

#include <charconv>
#include <csignal>
#include <thread>

#include "wsync/bus/core/log.hpp"
#include "wsync/cli/corrupting_channel.hpp"

namespace wsync::cli {

using bus::toString;

std::string_view toString(FaultAction action) {
  switch (action) {
    case FaultAction::Kill:
      return "kill";
    case FaultAction::Stop:
      return "stop";
    case FaultAction::Disconnect:
      return "disconnect";
    case FaultAction::Delay:
      return "delay";
    case FaultAction::CorruptReceive:
      return "corrupt-receive";
  }
  return "unknown";
}

std::string describe(const FaultSpec& spec) {
  if (spec.action == FaultAction::CorruptReceive) return "corrupt-receive@" + std::to_string(spec.version);
  std::string text =
      std::string(toString(spec.action)) + "@" + std::string(toString(spec.point)) + ":" + std::to_string(spec.version);
  if (spec.action == FaultAction::Disconnect || spec.action == FaultAction::Delay) {
    text += "+" + std::to_string(spec.outage.count());
  }
  return text;
}

namespace {

template <typename Enum>
std::optional<Enum> byName(std::string_view name, std::initializer_list<Enum> values) {
  for (const Enum value : values) {
    if (toString(value) == name) return value;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> number(std::string_view text) {
  std::uint64_t value = 0;
  const auto parsed = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || parsed.ec != std::errc() || parsed.ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

tl::expected<FaultSpec, std::string> parseFaultSpec(std::string_view text) {
  const std::string usage =
      "a fault is ACTION@POINT:VERSION[+MS] (ACTION kill|stop|disconnect|delay, POINT "
      "begin|pause|transfer|verify|commit|resume) or corrupt-receive@VERSION, not '" +
      std::string(text) + "'";
  constexpr std::string_view kCorruptReceive = "corrupt-receive@";
  if (text.starts_with(kCorruptReceive)) {
    const auto version = number(text.substr(kCorruptReceive.size()));
    if (!version || *version == 0) return tl::unexpected("the fault's version must be a number above 0: " + usage);
    return FaultSpec{FaultAction::CorruptReceive, FaultPoint::Transfer, *version, kDefaultFaultOutage};
  }
  const auto at = text.find('@');
  const auto colon = text.find(':', at == std::string_view::npos ? 0 : at);
  if (at == std::string_view::npos || colon == std::string_view::npos) return tl::unexpected(usage);
  FaultSpec spec;
  const auto action =
      byName(text.substr(0, at), {FaultAction::Kill, FaultAction::Stop, FaultAction::Disconnect, FaultAction::Delay});
  if (!action) return tl::unexpected("unknown fault action in '" + std::string(text) + "': " + usage);
  spec.action = *action;
  const auto point =
      byName(text.substr(at + 1, colon - at - 1), {FaultPoint::Begin, FaultPoint::Pause, FaultPoint::Transfer,
                                                   FaultPoint::Verify, FaultPoint::Commit, FaultPoint::Resume});
  if (!point) return tl::unexpected("unknown fault point in '" + std::string(text) + "': " + usage);
  spec.point = *point;
  std::string_view rest = text.substr(colon + 1);
  const auto plus = rest.find('+');
  const auto version = number(rest.substr(0, plus));
  if (!version || *version == 0) return tl::unexpected("the fault's version must be a number above 0: " + usage);
  spec.version = *version;
  if (plus != std::string_view::npos) {
    const auto millis = number(rest.substr(plus + 1));
    if (!millis || spec.action == FaultAction::Kill || spec.action == FaultAction::Stop) {
      return tl::unexpected("+MS is a duration for disconnect and delay only: " + usage);
    }
    spec.outage = std::chrono::milliseconds(*millis);
  }
  return spec;
}

std::optional<std::chrono::milliseconds> FaultInjector::reached(FaultPoint point, std::uint64_t version) {
  if (spec_.action == FaultAction::CorruptReceive) {
    // It strikes in the receive (corruptNow): here it only learns which version's round the agent is in.
    if (point == FaultPoint::Begin) roundVersion_.store(version, std::memory_order_release);
    return std::nullopt;
  }
  if (!armedAt(point, version)) return std::nullopt;
  if (fired_.exchange(true, std::memory_order_acq_rel)) return std::nullopt;
  log::warn("test fault {}: striking now", describe(spec_));
  log::logger()->flush();
  switch (spec_.action) {
    case FaultAction::Kill:
      std::raise(SIGKILL);
      return std::nullopt;
    case FaultAction::Stop:
      std::raise(SIGSTOP);  // returns once someone sends SIGCONT
      log::warn("test fault {}: continued", describe(spec_));
      return std::nullopt;
    case FaultAction::Delay:
      std::this_thread::sleep_for(spec_.outage);
      log::warn("test fault {}: delay over", describe(spec_));
      return std::nullopt;
    case FaultAction::Disconnect:
      return spec_.outage;
    case FaultAction::CorruptReceive:
      return std::nullopt;  // answered above
  }
  return std::nullopt;
}

void FaultInjector::decorateChannel(std::unique_ptr<bus::Channel>& channel) {
  if (spec_.action != FaultAction::CorruptReceive) return;
  channel = std::make_unique<CorruptingChannel>(std::move(channel), [this] { return corruptNow(); });
}

bool FaultInjector::corruptNow() {
  if (roundVersion_.load(std::memory_order_acquire) != spec_.version) return false;
  if (fired_.exchange(true, std::memory_order_acq_rel)) return false;
  log::warn("test fault {}: striking now", describe(spec_));
  return true;
}

}  // namespace wsync::cli
