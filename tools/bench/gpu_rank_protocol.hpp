#pragma once
// The lines between `wsync-bench gpu` and its rank processes (gpu.hpp), one per command or report, over the
// socket that is each rank's stdin and stdout (LinePipe::commands).
//
// Commands, in the order a measurement sends them (every rank gets each; the reply comes when it is done):
//   baseline BYTES [NCCL_ID]    allocate the raw baseline's buffers of BYTES (0: none); nccl: join the raw
//                               communicator                         -> baselined free= communicator=
//   open BUCKET_BYTES [NCCL_ID] open the channel, plan with buckets of BUCKET_BYTES
//                                                                    -> opened free_before= free_after= buckets=
//   prepare VERSION             the sender writes VERSION into its tensors and waits for it  -> prepared
//   go TRANSFER PATH START_NS   at START_NS (CLOCK_MONOTONIC), run PATH (channel or raw)
//                                                                    -> done start= end= [bytes= hi= lo=] [gpu_ns=]
//                                                                       min_free= buffers= tables= [handles=
//                                                                       generation=]
//   close                       close the channel                    -> closed
//   quit                        exit with status 0
// A rank's first line is `allocated free_before= free= total= allocations= allocated_bytes=` once its tensors exist,
// or `nomemory WHY` when the device was too full for them (it then waits for quit). Failures go to stderr, and the
// rank exits non-zero.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace wsync::bench {

inline constexpr const char* kChannelPath = "channel";
inline constexpr const char* kRawPath = "raw";

// A report: its first word and its key=value fields, or (for nomemory) the rest of the line as text.
struct RankLine {
  std::string word;
  std::map<std::string, std::string> fields;
  std::string text;

  bool has(const std::string& key) const { return fields.count(key) != 0; }
  // Throws BenchFailure when the field is missing or not a number.
  std::uint64_t number(const std::string& key) const;
  std::int64_t signedNumber(const std::string& key) const;
};

// Throws BenchFailure, naming `from`, for a line that is not WORD key=value...
RankLine parseRankLine(const std::string& line, const std::string& from);

// "WORD key=value ...".
std::string formatRankLine(const std::string& word, const std::vector<std::pair<std::string, std::string>>& fields);

}  // namespace wsync::bench
