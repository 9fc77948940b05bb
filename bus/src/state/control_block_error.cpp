#include "wsync/bus/state/control_block_error.hpp"

namespace wsync::bus {

std::string_view toString(ControlBlockError error) {
  switch (error) {
    case ControlBlockError::InvalidBusName:
      return "invalid bus name";
    case ControlBlockError::NoCoordinator:
      return "no coordinator runs this bus";
    case ControlBlockError::BusInUse:
      return "bus already taken on this host";
    case ControlBlockError::NotInitialized:
      return "control block not initialised";
    case ControlBlockError::LayoutMismatch:
      return "control block of an incompatible layout";
    case ControlBlockError::Unsafe:
      return "control block not private to this user";
    case ControlBlockError::SlotOutOfRange:
      return "agent slot out of range";
    case ControlBlockError::SlotMismatch:
      return "agent slot held by another agent";
    case ControlBlockError::SystemError:
      return "system error";
  }
  return "unknown control block error";
}

}  // namespace wsync::bus
