#pragma once
// Private to bus/gpu: CUDA and NCCL results as ChannelFailures that name the call.
#include <string>

#include <cuda_runtime_api.h>

#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus::gpu::detail {

inline ChannelFailure cudaFailure(const char* call, cudaError_t error) {
  return ChannelFailure{ChannelError::DeviceError,
                        std::string(call) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")"};
}

}  // namespace wsync::bus::gpu::detail

// Returns the failure from the enclosing function (whose result is a tl::expected<_, ChannelFailure>) when a CUDA
// call fails.
#define WSYNC_CUDA_TRY(call)                                                                \
  do {                                                                                      \
    if (const cudaError_t wsyncCudaError = (call); wsyncCudaError != cudaSuccess) {         \
      return tl::unexpected(::wsync::bus::gpu::detail::cudaFailure(#call, wsyncCudaError)); \
    }                                                                                       \
  } while (false)
