#include "wsync/bus/core/segment_name.hpp"

#include <unistd.h>

namespace wsync::bus {

std::string segmentName(std::string_view busName, std::string_view part) {
  std::string name = "wsync-" + std::to_string(::geteuid()) + "-" + std::string(busName);
  if (!part.empty()) name += "-" + std::string(part);
  return name;
}

}  // namespace wsync::bus
