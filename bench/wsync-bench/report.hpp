#pragma once
// One report model for every mode: cells hold a figure for the JSON and its text for the markdown, so that the two
// cannot disagree.
#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace wsync::bench {

using Json = nlohmann::ordered_json;  // keys in the order the mode writes them

// A figure: its JSON value (null for an empty cell) and its text in the markdown.
struct Cell {
  Cell() = default;
  Cell(std::string words) : json(words), text(std::move(words)) {}  // NOLINT: implicit, to keep rows short
  Cell(const char* words) : Cell(std::string(words)) {}             // NOLINT
  template <std::integral T>
  requires(!std::same_as<T, bool>) Cell(T count) : json(count), text(std::to_string(count)) {}  // NOLINT
  Cell(Json value, std::string shown) : json(std::move(value)), text(std::move(shown)) {}

  Json json;
  std::string text;
};

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for every process of the host

inline double microseconds(std::chrono::nanoseconds duration) {
  return duration.count() > 0 ? static_cast<double>(duration.count()) / 1e3 : 0;
}

std::string fixed(double value, int decimals);
std::string gib(std::uint64_t bytes);  // "1.5 GiB"
inline double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / kMiB; }
Cell number(double value, int decimals);
Cell ratio(double value);                               // "1.05x"
Cell verdict(bool met);                                 // true: "met"; false: a bold "missed"
Cell percent(double share);                             // 0.12: "12%"
Cell digests(std::size_t equal, std::size_t compared);  // "all 12/12", or a bold "11/12"

// Columns are a JSON key and a markdown header; a column whose cells are all numbers is right-aligned.
class Table {
 public:
  struct Column {
    std::string key;
    std::string header;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void row(std::vector<Cell> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }
  std::string markdown() const;
  Json json() const;  // an array with one object per row

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<Cell>> rows_;
};

struct Report {
  Json json;                    // "mode", "machine", "parameters", then what the mode adds
  std::ostringstream markdown;  // the sections after the parameters

  // Measurements that failed while others went on: the report is written naming them, and the run exits 1.
  std::vector<std::string> failures;

  Json& parameters() { return json["parameters"]; }
  // "## title", `text` and the table in the markdown; the table's rows under `key` in the JSON (unless empty).
  void section(const std::string& key, const std::string& title, const std::string& text, const Table& table);
};

// Nearest-rank percentiles, and the median (the mean of the middle two for an even count).
struct Summary {
  std::size_t samples = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, median = 0;
};
Summary summarize(std::vector<double> values);
// {"samples": N, "p50_us": ...}: the figures named in `figures`, each key suffixed with `unit`.
Json toJson(const Summary& summary, const std::string& unit,
            const std::vector<std::string>& figures = {"min", "p50", "p90", "p99", "max"});
// "1.23 (1.10-1.40)": the median and the range, the three in the JSON.
Cell spread(const Summary& summary, const std::string& unit, int decimals);

struct ModeOptions {
  bool quick = false;
  std::string outPath;
  std::string jsonPath;
  std::string commit;  // default: git describe in the source tree
};

// The runner of every mode: Ctrl-C, the machine, `measure` (progress on stderr), the wall time, the report; returns
// the exit status.
int runMode(const std::string& mode, const ModeOptions& options, const std::function<void(Report&)>& measure);

}  // namespace wsync::bench
