#pragma once
// The JSON lines between `wsync-bench gpu` and its ranks, over each rank's stdin and stdout (LinePipe).
// Commands, in the order a measurement sends them (every rank gets each; the report comes when it is done):
//   {"command": "baseline", "bytes", "nccl_id"?}  allocate the raw baseline's buffers of `bytes` (0: none); nccl: join
//                                                 the raw communicator   -> baselined: communicator
//   {"command": "open", "bucket_bytes", "nccl_id"?}  open the channel     -> opened: free_before, free_after, buckets
//   {"command": "prepare", "version"}  the sender writes `version` into its tensors and waits for it  -> prepared
//   {"command": "go", "transfer", "path", "start_ns"}  at start_ns (CLOCK_MONOTONIC), run `path` (channel or raw)
//                                      -> done: start, end, [bytes, hi, lo], [gpu_ns], min_free, buffers, tables,
//                                               [handles, generation]
//   {"command": "step"}   cuda_ipc, after each round: a receiver launches one kernel of its own and spins until it is
//                         done (the engine's next step)                  -> stepped: step_ns (0 from the sender)
//   {"command": "close"}  close the channel                              -> closed
//   {"command": "quit"}   exit with status 0
// A report is {"report": WORD, fields...}. A rank's first one is `allocated` (free_before, free, allocations) once its
// tensors exist, or `nomemory` (why) when the device was too full for them (it then waits for quit). Failures go to
// stderr, and the rank exits non-zero.
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_failure.hpp"
#include "report.hpp"

namespace wsync::bench {

inline std::int64_t nanosecondsOf(Clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}
inline Clock::time_point timeOf(std::int64_t nanoseconds) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(nanoseconds)));
}

inline constexpr const char* kChannelPath = "channel";
inline constexpr const char* kRawPath = "raw";

using RankLine = nlohmann::json;

// A command or a report; throws BenchFailure naming `from` for a line that is not a JSON object.
inline RankLine parseRankLine(const std::string& line, const std::string& from) {
  RankLine parsed = RankLine::parse(line, nullptr, false);
  if (!parsed.is_object()) throw BenchFailure(from + " sent '" + line + "', not a JSON object");
  return parsed;
}

// A field of a report (nlohmann_json throws, naming the key, when it is missing or not a number).
inline std::uint64_t unsignedField(const RankLine& line, const char* key) { return line.at(key).get<std::uint64_t>(); }
inline std::int64_t signedField(const RankLine& line, const char* key) { return line.at(key).get<std::int64_t>(); }
inline std::string word(const RankLine& line) { return line.value("report", line.value("command", "")); }

}  // namespace wsync::bench
