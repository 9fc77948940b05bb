#pragma once
// What a process can do with GPUs: how many it sees, whether NCCL can be loaded, and the NCCL unique id the
// coordinator hands to every rank of a communicator (so users never pick an address or a port).
//
// NCCL is loaded at run time (dlopen of libnccl.so.2), not linked: a coordinator or a CPU-only worker built with
// CUDA still starts on a host without NCCL, and a GPU host uses the NCCL its system (or its PyTorch wheel) provides.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus::gpu {

// GPUs this process can use; 0 where there is no driver or no device (the GPU tests then skip).
int visibleDeviceCount();

// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES): opaque, copied as is into TransferPlan.nccl_unique_id.
inline constexpr std::size_t kNcclUniqueIdBytes = 128;
using NcclUniqueId = std::array<std::byte, kNcclUniqueIdBytes>;

// NCCL's version (e.g. 22809 for 2.28.9), or why libnccl.so.2 could not be loaded.
tl::expected<int, ChannelFailure> ncclVersion();

// A fresh unique id. NCCL's bootstrap root (a listening socket and a thread) runs in the calling process until
// every rank has joined, so the caller must outlive the communicator's creation: the coordinator, normally.
tl::expected<NcclUniqueId, ChannelFailure> makeNcclUniqueId();

std::string toHex(const NcclUniqueId& id);
tl::expected<NcclUniqueId, ChannelFailure> ncclUniqueIdFromHex(const std::string& hex);

}  // namespace wsync::bus::gpu
