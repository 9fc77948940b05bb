#pragma once
// One report model for every mode: the mode fills a JSON document (for scripts) and markdown sections (for people and
// bench/results/) from the same results; runMode() adds the machine (CPU, kernel, date, commit, build), the mode's
// options and the wall time to both, and writes the markdown to stdout (and --out), the JSON to --json.
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace wsync::bench {

using Json = nlohmann::ordered_json;  // keys in the order the mode writes them

struct Report {
  Json json;                    // "mode", "machine", "parameters" {"quick"}, then the mode's own
  std::ostringstream markdown;  // the sections after the machine's
};

// A markdown table; `align` has one letter per column: 'l' for text, 'r' for figures.
class Table {
 public:
  Table(std::string align, std::vector<std::string> header) : align_(std::move(align)), header_(std::move(header)) {}
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  friend std::ostream& operator<<(std::ostream& out, const Table& table);

 private:
  std::string align_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double value, int decimals);
std::string ratio(double value);    // "1.05x"
std::string verdict(bool met);      // "met", or a bold "missed"
std::string percent(double share);  // "12%"

// The options every mode has.
struct ModeOptions {
  bool quick = false;  // a demonstration in seconds: too few samples for conclusions
  std::string outPath;
  std::string jsonPath;
  std::string commit;  // default: git describe in the source tree
};

// The runner of every mode: Ctrl-C handling, the machine, `measure` (progress on stderr), the wall time, the report.
// A failure is reported on stderr with the mode's name, an interruption as such. Returns the exit status.
int runMode(const std::string& mode, const ModeOptions& options, const std::function<void(Report&)>& measure);

}  // namespace wsync::bench
