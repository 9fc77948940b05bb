#pragma once
// Opening the agent's end of the channel a TransferPlan names. The shm channel is in every build; nccl and
// cuda_ipc only where wsync was built with CUDA (the library wsync::channels is then compiled from
// src/gpu/open_channel_gpu.cpp instead of src/open_channel_host.cpp), so the agents call one function either way.
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include <tl/expected.hpp>
#include <wsync/schemas/control_generated.h>

#include "wsync/bus/channel.hpp"

namespace wsync::bus {

struct ChannelSetup {
  // GPU channels: the CUDA device the agent's tensors are on. It is made current on the calling thread, which
  // must then be the one that sends or receives.
  int cudaDevice = 0;
  // GPU channels: polled while the channel waits for its peers (nccl's communicator is created by every rank
  // together) and during every transfer; true makes it give up. Agents pass "the coordinator ended this round".
  std::function<bool()> cancelProbe{};
  // nccl: every rank must have joined the communicator by then.
  std::chrono::steady_clock::time_point deadline{};
};

// Unsupported (naming the channel and why) for a channel this build lacks.
tl::expected<std::unique_ptr<Channel>, ChannelFailure> openChannel(const msg::TransferPlan& plan,
                                                                   const ChannelSetup& setup);

// The channels this build can open, for AgentHello.
std::vector<msg::ChannelKind> buildChannels();

}  // namespace wsync::bus
