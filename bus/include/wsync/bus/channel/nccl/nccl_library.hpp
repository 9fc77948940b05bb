#pragma once
// NCCL, loaded at run time (see gpu_runtime.hpp): the functions wsync calls, resolved once from libnccl.so.2.
// Public so that benchmarks measure the raw baseline with the very library the channel uses.
#include <nccl.h>

#include <tl/expected.hpp>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus::gpu {

struct NcclLibrary {
  int version = 0;
  decltype(&::ncclGetVersion) getVersion = nullptr;
  decltype(&::ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) commInitRankConfig = nullptr;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&::ncclCommAbort) commAbort = nullptr;
  decltype(&::ncclCommFinalize) commFinalize = nullptr;
  decltype(&::ncclCommDestroy) commDestroy = nullptr;
  decltype(&::ncclCommSplit) commSplit = nullptr;  // null before NCCL 2.18: NcclEnqueue::BlockingChild is then
                                                   // NonBlocking
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclGroupStart) groupStart = nullptr;
  decltype(&::ncclGroupEnd) groupEnd = nullptr;
  decltype(&::ncclGetErrorString) getErrorString = nullptr;
  decltype(&::ncclGetLastError) getLastError = nullptr;
};

// The process's NCCL, loaded on first use (thread-safe); Unsupported, naming what is missing, where it cannot be.
tl::expected<const NcclLibrary*, ChannelFailure> ncclLibrary();

}  // namespace wsync::bus::gpu
