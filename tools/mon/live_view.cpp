#include "live_view.hpp"

#include <cinttypes>
#include <cstdio>
#include <string_view>

namespace wsync::mon {

namespace {

template <typename... Args>
void line(std::string& out, const char* format, Args... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, format, args...);
  out += buffer;
  out += '\n';
}

std::string millis(double seconds) {
  if (seconds < 0) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f ms", seconds * 1e3);
  return buffer;
}

std::string megabytes(std::uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buffer;
}

std::string rateText(double bytesPerSecond) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f GB/s", bytesPerSecond / 1e9);
  return buffer;
}

std::string lower(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

}  // namespace

std::string renderView(const BusState& state, const std::string& busName, std::chrono::steady_clock::time_point now) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  std::string out;
  const auto beatAge = state.coordinatorSeen() ? duration_cast<milliseconds>(now - state.lastBeat()).count() : -1;
  line(out, "wsync bus '%s'  epoch %016" PRIx64 "  committed version %" PRIu64 "%s%s%s  coordinator %s",
       busName.c_str(), state.epoch(), state.committedVersion(), state.committedLabel().empty() ? "" : " (",
       state.committedLabel().c_str(), state.committedLabel().empty() ? "" : ")",
       beatAge < 0 ? "not heard yet" : (std::to_string(beatAge) + " ms ago").c_str());

  if (const auto& round = state.current()) {
    line(out, "round %" PRIu64 "  version %" PRIu64 "  phase %s  %u workers", round->round, round->version,
         lower(msg::EnumNameRoundPhase(round->phase)).c_str(), round->workers);
    if (round->phase == msg::RoundPhase::Transfer && round->totalBytes != 0) {
      const double rate = round->sendRate();
      line(out, "  payload: %s of %s sent (%.0f%%), slowest worker %s, %s", megabytes(round->bytesSent).c_str(),
           megabytes(round->totalBytes).c_str(),
           100.0 * static_cast<double>(round->bytesSent) / static_cast<double>(round->totalBytes),
           megabytes(round->slowestReceived).c_str(), rate > 0 ? rateText(rate).c_str() : "rate not known yet");
    }
  } else {
    line(out, "no round in progress");
  }

  out += '\n';
  line(out, "%-24s %-8s %5s %5s %-10s %16s %12s %12s", "agent", "role", "rank", "slot", "state", "applied version",
       "heartbeat", "this round");
  const std::uint64_t roundNow = state.current() ? state.current()->round : 0;
  for (const auto& [id, agent] : state.agents()) {
    const auto age =
        agent.heartbeatAgeMs + static_cast<std::uint64_t>(duration_cast<milliseconds>(now - agent.seenAt).count());
    const bool moving = roundNow != 0 && agent.transferRound == roundNow;
    line(out, "%-24s %-8s %5d %5u %-10s %16" PRIu64 " %9" PRIu64 " ms %12s", id.c_str(),
         lower(msg::EnumNameRole(agent.role)).c_str(), agent.rank, agent.slot,
         lower(msg::EnumNameAgentState(agent.state)).c_str(), agent.appliedVersion, age,
         moving ? megabytes(agent.transferBytes).c_str() : "-");
  }
  if (state.agents().empty()) line(out, "(no agents)");

  out += '\n';
  const RoundTotals& totals = state.totals();
  line(out, "last rounds (%" PRIu64 " committed, %" PRIu64 " aborted since this monitor started)", totals.committed,
       totals.aborted);
  line(out, "%7s %8s %-10s %8s %10s %10s %10s %12s", "round", "version", "outcome", "workers", "pause", "transfer",
       "total", "per worker");
  for (const RoundRecord& record : state.recent()) {
    line(out, "%7" PRIu64 " %8" PRIu64 " %-10s %8u %10s %10s %10s %12s", record.round, record.version,
         record.committed ? "committed" : "aborted", record.workers, millis(record.pauseSeconds).c_str(),
         millis(record.transferSeconds).c_str(), millis(record.totalSeconds).c_str(),
         record.committed ? megabytes(record.bytes).c_str() : "-");
    if (!record.committed) {
      line(out, "        %s: %s", msg::EnumNameAbortReason(record.reason), record.detail.c_str());
    }
  }
  if (state.recent().empty()) line(out, "(none yet)");
  return out;
}

}  // namespace wsync::mon
