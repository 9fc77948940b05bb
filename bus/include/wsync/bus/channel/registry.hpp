#pragma once
// The channels this build has, and the one place that names them: opening the agent's end of the channel a
// TransferPlan names, the listeners an agent that sends opens before its hello, and the coordinator's owners. The
// host channels (shm, tcp) are in every build; nccl and cuda_ipc only where wsync was built with CUDA (the library
// wsync::channels is then compiled from registry_gpu.cpp instead of registry_host.cpp), so the roles call the same
// functions either way and never name a transport.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/channel_listeners.hpp"
#include "wsync/bus/channel/channel_owner.hpp"

namespace wsync::bus {

struct ChannelSetup {
  // GPU channels: the CUDA device the agent's tensors are on. It is made current on the calling thread, which
  // must then be the one that sends or receives.
  int cudaDevice = 0;
  // Polled while the channel waits for its peers (nccl's communicator is created by every rank together) and
  // during every transfer; true makes it give up. Agents pass "the coordinator ended this round".
  std::function<bool()> cancelProbe{};
  // Every member must have joined the channel by then (nccl).
  std::chrono::steady_clock::time_point deadline{};
  // The agent's listeners (openChannelListeners), for a channel whose sender listens (tcp); none for an agent that
  // only receives.
  std::shared_ptr<ChannelListeners> listeners{};
  // This agent's id: a channel whose ends meet on their own (tcp) tells its peers, so that their faults name it.
  std::string agentId{};
};

// Unsupported (naming the channel and why) for a channel this build lacks.
tl::expected<std::unique_ptr<Channel>, ChannelFailure> openChannel(const msg::TransferPlan& plan,
                                                                   const ChannelSetup& setup);

// The channels this build can open, for AgentHello.
std::vector<msg::ChannelKind> buildChannels();

// What an agent sending on `kinds` must open before its hello (channel_listeners.hpp): for tcp, a socket bound to
// this host's address on the route to the coordinator (`busTransport`: "ipc" or tcp://HOST:PORT) unless
// $WSYNC_PAYLOAD_HOST names another, on a port the kernel picks, listening only while a send admits its receivers.
// Channels that need nothing add nothing.
tl::expected<std::shared_ptr<ChannelListeners>, ChannelFailure> openChannelListeners(
    std::span<const msg::ChannelKind> kinds, std::string_view busTransport);

// The memory the tensors of a round on `kind` are in (a worker offers the channels its bindings' memory suits).
TensorMemory channelMemory(msg::ChannelKind kind);

// A channel as the programs' --channel flag names it ("shm", "tcp", "nccl", "cuda_ipc"), and back.
std::string channelName(msg::ChannelKind kind);
std::optional<msg::ChannelKind> parseChannelName(std::string_view name);

// What the coordinator's owners are made from.
struct ChannelOwnersConfig {
  std::string busName;
  std::uint64_t hostBucketBytes = 0;  // the shm arena's buffers
  std::uint32_t bufferCount = 2;
};

// One owner for every channel this build has (the shm arena is created here, replacing one a dead coordinator
// left), or why one could not be made.
tl::expected<std::vector<std::unique_ptr<ChannelOwner>>, ChannelFailure> createChannelOwners(
    const ChannelOwnersConfig& config);

}  // namespace wsync::bus
