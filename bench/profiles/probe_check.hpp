#pragma once
// The probes' one way to fail (bench/profiles/*.cu, single-file programs built by nvcc on the GPU machines): print
// what failed and why, and exit 1. The NCCL overload exists where the probe included <nccl.h> before this header.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace probe {

inline void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

#ifdef NCCL_MAJOR
inline void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(result));
    std::exit(1);
  }
}
#endif

}  // namespace probe
