#pragma once
#include <cstdint>
#include <string_view>

#include "wsync/bus/core/failure.hpp"

namespace wsync::bus {

enum class ControlBlockError : std::uint8_t {
  InvalidBusName,
  NoCoordinator,   // no control block for this bus: its coordinator is not running
  BusInUse,        // taken on this host: by a live coordinator (detail: its pid) or another user (detail: its uid)
  NotInitialized,  // the block exists but its creator has not finished (or died) initialising it
  LayoutMismatch,  // another magic, layout version or size: written by an incompatible wsync
  Unsafe,          // the segment belongs to another user or is open to others
  SlotOutOfRange,
  SlotMismatch,  // the slot does not hold the agent that tries to attach to it
  SystemError,   // an operating-system call failed (detail)
};

std::string_view toString(ControlBlockError error);

using ControlBlockFailure = Failure<ControlBlockError>;

}  // namespace wsync::bus
