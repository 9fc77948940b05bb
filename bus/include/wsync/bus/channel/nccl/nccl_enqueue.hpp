#pragma once
// How the nccl channel hands its broadcasts to NCCL (docs/gpu-channels.md, "Enqueueing"), and the environment
// variable that chooses it in the agents.
#include <cstdint>
#include <optional>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus::gpu {

enum class NcclEnqueue : std::uint8_t {
  // The default. The ranks join a non-blocking communicator, so open() keeps its deadline and cancel probe. The
  // broadcasts then go through a blocking child split from it (ncclCommSplit), so NCCL enqueues each in the calling
  // thread instead of handing it to a thread of its own, which every transfer's first broadcast would wait out. A
  // BlockingCallGuard ends a call that outlives the deadline, the stall timeout or a cancel (only the first
  // broadcast waits for peers: it connects the ranks) by aborting the joined communicator, whose resources and abort
  // flag the child shares (splitShare). An NCCL without ncclCommSplit (before 2.18) gets NonBlocking instead.
  BlockingChild,
  // Every broadcast on the non-blocking communicator, settled by polling: what an NCCL without ncclCommSplit gets,
  // and the agents' way back should the child misbehave on some NCCL.
  NonBlocking,
};

// Chooses the agents' NcclEnqueue: "child" (the default, also when unset or empty) or "nonblocking". Every rank of
// a communicator should choose the same.
inline constexpr const char* kNcclEnqueueVariable = "WSYNC_NCCL_ENQUEUE";

// The agents' choice from `value` (kNcclEnqueueVariable's; null or empty: the default).
tl::expected<NcclEnqueue, ChannelFailure> agentNcclEnqueue(const char* value);

std::string_view toString(NcclEnqueue enqueue);
// The mode toString names `name`, if any.
std::optional<NcclEnqueue> ncclEnqueueNamed(std::string_view name);

}  // namespace wsync::bus::gpu
