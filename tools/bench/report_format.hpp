#pragma once
// Formatting shared by the reports of every mode: numbers, JSON strings and the machine a result was measured on.
#include <sstream>
#include <string>

#include "machine_info.hpp"

namespace wsync::bench {

std::string fixed(double value, int decimals);
std::string ratio(double value);  // "1.05x"
std::string verdict(bool met);    // "met" or a bold "missed"
std::string jsonString(const std::string& text);
std::string jsonBool(bool value);

// The "## Machine" table of a markdown report.
void machineSection(std::ostringstream& out, const MachineInfo& machine);
// {"cpu": ..., ...}: the machine as a JSON object.
std::string machineJson(const MachineInfo& machine);

}  // namespace wsync::bench
