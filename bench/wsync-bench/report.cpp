#include "report.hpp"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>

#include <zmq.hpp>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

volatile std::sig_atomic_t receivedSignal = 0;

extern "C" void recordSignal(int signalNumber) { receivedSignal = signalNumber; }

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

// The value of the first "key : value" line of /proc/cpuinfo with this key.
std::string cpuinfoField(const std::string& key) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return "unknown";
}

std::string gitDescribe() {
  FILE* pipe = ::popen(("git -C '" WSYNC_BENCH_SOURCE_DIR "' describe --always --dirty --abbrev=12 2>/dev/null"), "r");
  if (pipe == nullptr) return "unknown";
  std::array<char, 128> buffer{};
  std::string output;
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) output += buffer.data();
  return ::pclose(pipe) == 0 && !trim(output).empty() ? trim(output) : "unknown";
}

// What a result was measured on, so that figures from different machines are never compared unknowingly.
Json describeMachine(const std::string& commit) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int usable = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  utsname names{};
  const std::string kernel =
      ::uname(&names) == 0 ? std::string(names.sysname) + " " + names.release + " " + names.machine : "unknown";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::array<char, 32> date{};
  std::strftime(date.data(), date.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  const auto [major, minor, patch] = zmq::version();
  return {
    {"cpu", cpuinfoField("model name")},
        {"virtualised", (" " + cpuinfoField("flags") + " ").find(" hypervisor ") != std::string::npos},
        {"online_cpus", ::sysconf(_SC_NPROCESSORS_ONLN)}, {"usable_cpus", usable}, {"kernel", kernel},
        {"date", date.data()}, {"commit", commit.empty() ? gitDescribe() : commit},
        {"build", WSYNC_BENCH_BUILD_TYPE[0] != '\0' ? WSYNC_BENCH_BUILD_TYPE : "unspecified"},
#if defined(__clang__)
        {"compiler", std::string("clang ") + __clang_version__},
#else
        {"compiler", std::string("gcc ") + __VERSION__},
#endif
    {
      "zmq", std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch)
    }
  };
}

// A JSON value as a cell's text: strings bare, lists comma-separated.
std::string plain(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) {
    std::ostringstream text;
    text << std::setprecision(4) << value.get<double>();
    return text.str();
  }
  if (!value.is_array()) return value.dump();
  std::string text;
  for (const Json& item : value) text += (text.empty() ? "" : ", ") + plain(item);
  return text;
}

std::string keyValueTable(const std::string& title, const Json& object) {
  std::string text = "| " + title + " | |\n|---|---|\n";
  for (const auto& [key, value] : object.items()) text += "| " + key + " | " + plain(value) + " |\n";
  return text + "\n";
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw BenchFailure("cannot write " + path);
}

}  // namespace

std::string fixed(double value, int decimals) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(decimals) << value;
  return out.str();
}

Cell number(double value, int decimals) { return {value, fixed(value, decimals)}; }
Cell ratio(double value) { return {value, fixed(value, 2) + "x"}; }
Cell verdict(bool met) { return {met, met ? "met" : "**missed**"}; }
Cell percent(double share) { return {share, std::to_string(std::lround(share * 100)) + "%"}; }
std::string gib(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / (1024.0 * kMiB), 1) + " GiB"; }
Cell digests(std::size_t equal, std::size_t compared) {
  const bool all = compared > 0 && equal == compared;
  const std::string text = std::to_string(equal) + "/" + std::to_string(compared);
  return {all, all ? "all " + text : "**" + text + "**"};
}

std::string Table::markdown() const {
  std::string text;
  for (const Column& column : columns_) text += "| " + column.header + " ";
  text += "|\n";
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const bool figures = std::all_of(rows_.begin(), rows_.end(), [c](const std::vector<Cell>& row) {
      return c >= row.size() || row[c].text.empty() || row[c].json.is_number();
    });
    text += figures ? "|---:" : "|---";
  }
  text += "|\n";
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < columns_.size(); ++c) text += "| " + (c < row.size() ? row[c].text : "") + " ";
    text += "|\n";
  }
  return text + "\n";
}

Json Table::json() const {
  Json rows = Json::array();
  for (const auto& row : rows_) {
    Json& object = rows.emplace_back(Json::object());
    for (std::size_t c = 0; c < columns_.size() && c < row.size(); ++c) object[columns_[c].key] = row[c].json;
  }
  return rows;
}

void Report::section(const std::string& key, const std::string& title, const std::string& text, const Table& table) {
  markdown << "## " << title << "\n\n" << (text.empty() ? "" : text + "\n\n") << table.markdown();
  if (!key.empty()) json[key] = table.json();
}

Summary summarize(std::vector<double> values) {
  Summary summary;
  summary.samples = values.size();
  if (values.empty()) return summary;
  std::sort(values.begin(), values.end());
  const auto rank = [&values](double fraction) {
    const double nearest = std::ceil(fraction * static_cast<double>(values.size()));
    return values[std::min(nearest < 1 ? 0 : static_cast<std::size_t>(nearest) - 1, values.size() - 1)];
  };
  const std::size_t middle = values.size() / 2;
  summary.min = values.front();
  summary.p50 = rank(0.50);
  summary.p90 = rank(0.90);
  summary.p99 = rank(0.99);
  summary.max = values.back();
  summary.median = values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
  return summary;
}

Json toJson(const Summary& summary, const std::string& unit, const std::vector<std::string>& figures) {
  static const std::map<std::string, double Summary::*> members{{"min", &Summary::min}, {"p50", &Summary::p50},
                                                                {"p90", &Summary::p90}, {"p99", &Summary::p99},
                                                                {"max", &Summary::max}, {"median", &Summary::median}};
  Json json{{"samples", summary.samples}};
  for (const std::string& figure : figures) json[figure + "_" + unit] = summary.*members.at(figure);
  return json;
}

Cell spread(const Summary& summary, const std::string& unit, int decimals) {
  return {
      toJson(summary, unit, {"median", "min", "max"}),
      fixed(summary.median, decimals) + " (" + fixed(summary.min, decimals) + "-" + fixed(summary.max, decimals) + ")"};
}

bool interrupted() { return receivedSignal != 0; }

void throwIfInterrupted() {
  if (interrupted()) throw BenchFailure("interrupted by signal " + std::to_string(receivedSignal));
}

int runMode(const std::string& mode, const ModeOptions& options, const std::function<void(Report&)>& measure) {
  struct sigaction action {};
  action.sa_handler = recordSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking poll or sleep must return EINTR so the run can stop
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  try {
    const auto start = Clock::now();
    Report report;
    report.json = {
        {"mode", mode}, {"machine", describeMachine(options.commit)}, {"parameters", {{"quick", options.quick}}}};
    measure(report);
    if (!report.failures.empty()) {
      report.json["failures"] = report.failures;
      report.markdown << "## Failed\n\n";
      for (const std::string& failure : report.failures) report.markdown << "- " << failure << "\n";
      report.markdown << "\n";
    }
    const double wallSeconds = std::chrono::duration<double>(Clock::now() - start).count();
    report.json["wall_seconds"] = wallSeconds;
    Json machine = report.json["machine"];
    machine["run"] = (options.quick ? "`--quick`: a demonstration, too few samples for conclusions" : "full") +
                     std::string("; wall time ") + fixed(wallSeconds, 1) + " s";
    const std::string markdown = "# wsync-bench " + mode + ": " + plain(machine["date"]) + "\n\n" +
                                 keyValueTable("Machine", machine) + keyValueTable("Parameter", report.parameters()) +
                                 report.markdown.str() + "Method: bench/wsync-bench/README.md, mode `" + mode + "`.\n";
    std::cout << markdown << std::flush;
    if (!options.outPath.empty()) writeFile(options.outPath, markdown);
    if (!options.jsonPath.empty()) writeFile(options.jsonPath, report.json.dump(2) + "\n");
    for (const std::string& failure : report.failures) std::cerr << "wsync-bench " << mode << ": " << failure << '\n';
    return report.failures.empty() ? 0 : 1;
  } catch (const std::exception& error) {
    if (interrupted()) {
      std::cerr << "wsync-bench " << mode << ": interrupted; agents stopped, nothing written\n";
      return 130;  // the shell's convention for a run ended by Ctrl-C
    }
    std::cerr << "wsync-bench " << mode << ": " << error.what() << '\n';
    return 1;
  }
}

}  // namespace wsync::bench
