#include "report_format.hpp"

#include <array>
#include <cstdio>
#include <iomanip>

namespace wsync::bench {

std::string fixed(double value, int decimals) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(decimals) << value;
  return out.str();
}

std::string ratio(double value) { return fixed(value, 2) + "x"; }

std::string verdict(bool met) { return met ? "met" : "**missed**"; }

std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          std::array<char, 8> escaped{};
          std::snprintf(escaped.data(), escaped.size(), "\\u%04x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += escaped.data();
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string jsonBool(bool value) { return value ? "true" : "false"; }

void machineSection(std::ostringstream& out, const MachineInfo& m) {
  out << "## Machine\n\n"
      << "| | |\n|---|---|\n"
      << "| CPU | " << m.cpuModel << (m.virtualised ? " (virtual machine)" : "") << " |\n"
      << "| CPUs | " << m.onlineCpus << " online, " << m.usableCpus << " usable by the benchmark |\n"
      << "| Kernel | " << m.kernel << " |\n"
      << "| Date | " << m.dateUtc << " |\n"
      << "| Commit | " << m.commit << " |\n"
      << "| Build | " << m.buildType << ", " << m.compiler << ", libzmq " << m.zmqVersion << " |\n\n";
}

std::string machineJson(const MachineInfo& m) {
  return "{\"cpu\": " + jsonString(m.cpuModel) + ", \"virtualised\": " + jsonBool(m.virtualised) +
         ", \"online_cpus\": " + std::to_string(m.onlineCpus) + ", \"usable_cpus\": " + std::to_string(m.usableCpus) +
         ", \"kernel\": " + jsonString(m.kernel) + ", \"date\": " + jsonString(m.dateUtc) +
         ", \"commit\": " + jsonString(m.commit) + ", \"build\": " + jsonString(m.buildType) +
         ", \"compiler\": " + jsonString(m.compiler) + ", \"zmq\": " + jsonString(m.zmqVersion) + "}";
}

}  // namespace wsync::bench
