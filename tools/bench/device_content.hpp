#pragma once
// The content `wsync-bench gpu` moves: written on the device by a kernel (a model of 61 GB is never built on the
// host), and recomputed on the host for the host check (expectedDeviceDigest, gpu.hpp). Included by nvcc and by the
// C++ compiler alike, so it needs nothing but the CUDA runtime's header.
//
// Word `w` (little-endian 64 bits) of tensor `t` at version `v` is word(key(seed, t, v), w); a tensor whose size is
// not a multiple of 8 ends with the low bytes of its next word. Every word changes from one version to the next, so
// each round really moves new bytes.
#include <cstdint>

#include <cuda_runtime_api.h>

#if defined(__CUDACC__)
#define WSYNC_BENCH_HOST_DEVICE __host__ __device__
#else
#define WSYNC_BENCH_HOST_DEVICE
#endif

namespace wsync::bench::device_content {

inline constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;  // 2^64 / phi, splitmix64's increment
inline constexpr std::uint64_t kTensorStep = 0xD1B54A32D192ED03ULL;

// splitmix64's finaliser: consecutive inputs give outputs that look independent.
WSYNC_BENCH_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

WSYNC_BENCH_HOST_DEVICE inline std::uint64_t tensorKey(std::uint64_t seed, std::uint32_t tensor,
                                                        std::uint64_t version) {
  return mix64(mix64(seed ^ (version * kGolden)) + (std::uint64_t{tensor} + 1) * kTensorStep);
}

WSYNC_BENCH_HOST_DEVICE inline std::uint64_t word(std::uint64_t key, std::uint64_t index) {
  return mix64(key + index * kGolden);
}

}  // namespace wsync::bench::device_content

namespace wsync::bench {

// Enqueues on `stream` the content of the tensor whose key is `key` into `bytes` bytes at `data` (device memory,
// 8-byte aligned). Returns the launch's error.
cudaError_t launchContentFill(void* data, std::uint64_t bytes, std::uint64_t key, cudaStream_t stream);

}  // namespace wsync::bench
