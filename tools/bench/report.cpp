#include "report.hpp"

#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "bench_failure.hpp"
#include "machine_info.hpp"

namespace wsync::bench {
namespace {

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw BenchFailure("cannot write " + path);
}

Json toJson(const MachineInfo& m) {
  return {{"cpu", m.cpuModel},   {"virtualised", m.virtualised}, {"online_cpus", m.onlineCpus},
          {"usable_cpus", m.usableCpus}, {"kernel", m.kernel}, {"date", m.dateUtc},
          {"commit", m.commit},  {"build", m.buildType},         {"compiler", m.compiler},
          {"zmq", m.zmqVersion}};
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Table& table) {
  const auto line = [&out](const std::vector<std::string>& cells) {
    for (const std::string& cell : cells) out << "| " << cell << " ";
    out << "|\n";
  };
  line(table.header_);
  for (const char align : table.align_) out << (align == 'r' ? "|---:" : "|---");
  out << "|\n";
  for (const auto& row : table.rows_) line(row);
  return out << "\n";
}

std::string fixed(double value, int decimals) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(decimals) << value;
  return out.str();
}

std::string ratio(double value) { return fixed(value, 2) + "x"; }
std::string verdict(bool met) { return met ? "met" : "**missed**"; }
std::string percent(double share) { return std::to_string(std::lround(share * 100)) + "%"; }

int runMode(const std::string& mode, const ModeOptions& options, const std::function<void(Report&)>& measure) {
  installInterruptHandlers();
  try {
    const auto start = std::chrono::steady_clock::now();
    const MachineInfo m = describeMachine(options.commit);
    Report report;
    report.json = {{"mode", mode}, {"machine", toJson(m)}, {"parameters", {{"quick", options.quick}}}};
    measure(report);
    const double wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.json["wall_seconds"] = wallSeconds;

    std::ostringstream markdown;
    markdown << "# wsync-bench " << mode << ": " << m.dateUtc << "\n\n## Machine\n\n| | |\n|---|---|\n"
             << "| CPU | " << m.cpuModel << (m.virtualised ? " (virtual machine)" : "") << " |\n"
             << "| CPUs | " << m.onlineCpus << " online, " << m.usableCpus << " usable by the benchmark |\n"
             << "| Kernel | " << m.kernel << " |\n| Date | " << m.dateUtc << " |\n| Commit | " << m.commit << " |\n"
             << "| Build | " << m.buildType << ", " << m.compiler << ", libzmq " << m.zmqVersion << " |\n"
             << "| Run | " << (options.quick ? "`--quick`: a demonstration, too few samples for conclusions" : "full")
             << "; wall time " << fixed(wallSeconds, 1) << " s |\n\n"
             << report.markdown.str() << "Method: tools/bench/README.md, mode `" << mode << "`.\n";
    std::cout << markdown.str() << std::flush;
    if (!options.outPath.empty()) writeFile(options.outPath, markdown.str());
    if (!options.jsonPath.empty()) writeFile(options.jsonPath, report.json.dump(2) + "\n");
    return 0;
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
