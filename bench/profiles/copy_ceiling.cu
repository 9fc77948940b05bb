// The ceiling of copies made by SMs against cudaMemcpyAsync on one GPU: the profile behind issue 18's cuda_ipc
// work (bench/results/issue18-cuda-ipc-profile-2026-11-25.md). It times wsync's copy kernel (copy_kernel.cu, with
// its checksum) on one run or on many small ones, plain grid-stride and block-chunked copies, and the copy engine;
// IPC=1 imports the source from a child process over CUDA IPC, as a cuda_ipc receiver reads it. Not built by CMake:
//   nvcc -O3 -std=c++20 -arch=sm_90 -Ibus/src -Ibus/include -Ibuild/schemas/include \
//        -o copy_ceiling bench/profiles/copy_ceiling.cu
//   ./copy_ceiling BYTES [RUN_BYTES]   (RUN_BYTES 0: one run)
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cstdlib>
#include "channel/gpu/copy_kernel.cu"
using namespace wsync::bus::gpu::detail;
using wsync::bus::DeviceChecksumSums;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

template <int U>
__global__ void __launch_bounds__(512) plainCopy(const uint4* __restrict__ s, uint4* __restrict__ d, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = s[i + k * stride];
#pragma unroll
    for (int k = 0; k < U; ++k) d[i + k * stride] = v[k];
  }
  for (; i < n; i += stride) d[i] = s[i];
}
// Block-contiguous: each block owns a contiguous slice (like our chunks) instead of grid-strided vectors.
template <int U>
__global__ void __launch_bounds__(512) chunkCopy(const uint4* __restrict__ s, uint4* __restrict__ d, size_t n, size_t chunk) {
  for (size_t c = blockIdx.x; c * chunk < n; c += gridDim.x) {
    size_t b = c * chunk, e = min(n, b + chunk);
    size_t i = b + threadIdx.x;
    for (; i + (U - 1) * 512 < e; i += U * 512) {
      uint4 v[U];
#pragma unroll
      for (int k = 0; k < U; ++k) v[k] = s[i + k * 512];
#pragma unroll
      for (int k = 0; k < U; ++k) d[i + k * 512] = v[k];
    }
    for (; i < e; i += 512) d[i] = s[i];
  }
}

int main(int argc, char** argv) {
  size_t bytes = (argc > 1 ? atoll(argv[1]) : 4ull << 30);
  size_t tensor = (argc > 2 ? atoll(argv[2]) : 0);  // 0: one run
  void *src, *dst;
  const bool ipc = getenv("IPC") != nullptr;
  if (ipc) {
    int toParent[2], toChild[2]; pipe(toParent); pipe(toChild);
    if (fork() == 0) {  // the exporter: allocates the source, hands its handle over, waits for the parent
      void* mine; CK(cudaMalloc(&mine, bytes)); CK(cudaMemset(mine, 1, bytes)); CK(cudaDeviceSynchronize());
      cudaIpcMemHandle_t h; CK(cudaIpcGetMemHandle(&h, mine)); write(toParent[1], &h, sizeof h);
      char c; read(toChild[0], &c, 1); _exit(0);
    }
    cudaIpcMemHandle_t h; read(toParent[0], &h, sizeof h);
    CK(cudaIpcOpenMemHandle(&src, h, cudaIpcMemLazyEnablePeerAccess));
    printf("source imported over CUDA IPC from a child process\n");
  } else {
    CK(cudaMalloc(&src, bytes)); CK(cudaMemset(src, 1, bytes));
  }
  CK(cudaMalloc(&dst, bytes)); CK(cudaMemset(dst, 0, bytes));
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t st; CK(cudaStreamCreate(&st));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  // our table
  std::vector<CopyRun> runs; std::vector<uint32_t> chunkRuns; uint32_t chunks = 0;
  size_t step = tensor ? tensor : bytes;
  for (size_t off = 0, t = 0; off < bytes; off += step, ++t) {
    size_t n = std::min(step, bytes - off);
    runs.push_back(CopyRun{(uint64_t)src + off, (uint64_t)dst + off, n, 0, (uint32_t)t, chunks, 0});
    uint32_t c = (n + kCopyChunkBytes - 1) / kCopyChunkBytes;
    chunkRuns.insert(chunkRuns.end(), c, (uint32_t)(runs.size() - 1)); chunks += c;
  }
  CopyRun* dRuns; uint32_t* dChunks; DeviceChecksumSums* sums;
  CK(cudaMalloc(&dRuns, runs.size() * sizeof(CopyRun))); CK(cudaMalloc(&dChunks, chunkRuns.size() * 4)); CK(cudaMalloc(&sums, sizeof(DeviceChecksumSums)));
  CK(cudaMemcpy(dRuns, runs.data(), runs.size() * sizeof(CopyRun), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dChunks, chunkRuns.data(), chunkRuns.size() * 4, cudaMemcpyHostToDevice));
  size_t n = bytes / 16;
  auto time = [&](const char* what, auto&& fn) -> int {
    float best = 1e9, sum = 0;
    for (int r = 0; r < 8; ++r) {
      CK(cudaEventRecord(a, st)); fn(); CK(cudaGetLastError()); CK(cudaEventRecord(b, st)); CK(cudaEventSynchronize(b));
      float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (r >= 2) { best = std::min(best, ms); sum += ms; }
    }
    printf("%-34s best %.3f ms mean %.3f ms  %.0f GB/s (copy)\n", what, best, sum / 6, bytes / best / 1e6);
    return 0;
  };
  time("cudaMemcpyAsync", [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st); });
  for (int bl : {32, 64, 96, sms, 1024, 2 * sms, 4 * sms}) {
    char name[64]; snprintf(name, 64, "wsync copyRuns %u runs %d blk", (unsigned)runs.size(), bl);
    time(name, [&] { launchCopyRuns(dRuns, dChunks, chunks, sums, bl, st); });
  }
  time("plain grid-stride U4 2/SM", [&] { plainCopy<4><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n); });
  time("plain grid-stride U4 4/SM", [&] { plainCopy<4><<<4 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n); });
  time("plain grid-stride U8 2/SM", [&] { plainCopy<8><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n); });
  time("chunk 128K U4 1024 blk", [&] { chunkCopy<4><<<1024, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 8192); });
  time("chunk 128K U4 2/SM", [&] { chunkCopy<4><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 8192); });
  time("chunk 1M U4 2/SM", [&] { chunkCopy<4><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 65536); });
  time("chunk 1M U8 2/SM", [&] { chunkCopy<8><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 65536); });
  return 0;
}
