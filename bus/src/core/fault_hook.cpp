#include "wsync/bus/core/fault_hook.hpp"

namespace wsync::bus {

std::string_view toString(FaultPoint point) {
  switch (point) {
    case FaultPoint::Begin:
      return "begin";
    case FaultPoint::Pause:
      return "pause";
    case FaultPoint::Transfer:
      return "transfer";
    case FaultPoint::Verify:
      return "verify";
    case FaultPoint::Commit:
      return "commit";
    case FaultPoint::Resume:
      return "resume";
  }
  return "unknown";
}

}  // namespace wsync::bus
