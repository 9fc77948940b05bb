#pragma once
#include <cstdint>
#include <string_view>

#include "wsync/bus/core/failure.hpp"

namespace wsync::bus {

// Failures of a payload channel. Any of them aborts the transfer; a receiver then drops what it staged.
enum class ChannelError : std::uint8_t {
  InvalidGeometry,  // bucket size, buffer or receiver count out of range
  NoArena,          // the channel's segment (shm arena, cuda_ipc segment) does not exist
  LayoutMismatch,   // the segment was written by an incompatible build, or is not initialised
  Unsafe,           // the segment belongs to another user or is open to others
  PlanMismatch,     // the plan does not fit the arena or the bound buffers (nothing was moved)
  Timeout,          // a peer did not fill or drain in time: it is dead or stuck
  Aborted,          // cancelled: the round's owner ended it (abort word, cancel probe)
  Overwritten,      // a bucket changed while it was being copied: this transfer was abandoned
  SystemError,
  Unsupported,        // the plan names a channel this build or this agent does not have
  DeviceError,        // a CUDA call failed (the detail names it and CUDA's message)
  CommunicatorError,  // NCCL failed, or the communicator was aborted and must be rebuilt
  DigestMismatch,     // receivers of one transfer computed different digests (cuda_ipc compares them itself)
  PeerGone,           // a peer closed or reset its connection mid-transfer (tcp): it died or gave up
  Refused,            // the peer refused this side (tcp: a receiver's token, index or byte count is not the round's)
};

std::string_view toString(ChannelError error);

using ChannelFailure = Failure<ChannelError>;

// What a failed transfer says about the round, for the agents' reports: the coordinator ended it (nothing to
// report: it knows), a peer stopped filling or draining or its connection is gone (dead or stuck: Timeout,
// PeerGone), or this side failed on its own.
enum class FailureCause : std::uint8_t { Cancelled, PeerStalled, Local };
FailureCause causeOf(ChannelError error);

}  // namespace wsync::bus
