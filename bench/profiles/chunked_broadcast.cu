// The floor of any channel that broadcasts a model in pieces: plain ncclBroadcast of TOTAL bytes from GPU 0 to
// GPUs 1..N-1, in one call and then in back-to-back calls of each CHUNK size, in place, nothing else on the GPUs.
// Issue 18 compares the channel, which broadcasts at most half a bucket at a time (its staging buffers), against
// one raw broadcast of the whole model: what the same raw broadcast costs when cut into half buckets bounds what
// any staging of that size can reach.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o chunked_broadcast bench/profiles/chunked_broadcast.cu -lnccl
//   NCCL_NVLS_ENABLE=0 ./chunked_broadcast GPUS TOTAL_MIB CHUNK_MIB...
//
// One process drives every GPU (ncclCommInitAll, one group per chunk); the time is the host's, from the first call
// to every stream done, the median of kRepeats. It also prints the GPU memory NCCL took on each GPU once connected
// (device memory in use after the first broadcasts, less before the communicators and buffers): run it under
// NCCL_BUFFSIZE or NCCL_PROTO to see what a setting costs per call against what it saves.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.hpp"

namespace {

using probe::check;

constexpr int kRepeats = 7;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s GPUS TOTAL_MIB CHUNK_MIB...\n", argv[0]);
    return 2;
  }
  const int gpus = std::atoi(argv[1]);
  const size_t total = size_t(std::atoll(argv[2])) << 20;
  std::vector<ncclComm_t> comms(gpus);
  std::vector<int> devices(gpus);
  for (int d = 0; d < gpus; ++d) devices[d] = d;
  // Free memory on each GPU with its context up and nothing of NCCL's yet.
  auto freeBytes = [&](int d) {
    size_t free = 0, all = 0;
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaMemGetInfo(&free, &all), "cudaMemGetInfo");
    return free;
  };
  std::vector<size_t> before(gpus);
  for (int d = 0; d < gpus; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaFree(nullptr), "cudaFree");
    before[d] = freeBytes(d);
  }
  check(ncclCommInitAll(comms.data(), gpus, devices.data()), "ncclCommInitAll");
  std::vector<void*> buffers(gpus);
  std::vector<cudaStream_t> streams(gpus);
  for (int d = 0; d < gpus; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaMalloc(&buffers[d], total), "cudaMalloc");
    check(cudaMemset(buffers[d], d, total), "cudaMemset");
    check(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking), "cudaStreamCreate");
  }
  auto run = [&](size_t chunk) {
    const auto begin = std::chrono::steady_clock::now();
    for (size_t offset = 0; offset < total; offset += chunk) {
      const size_t bytes = std::min(chunk, total - offset);
      check(ncclGroupStart(), "ncclGroupStart");
      for (int d = 0; d < gpus; ++d) {
        char* at = static_cast<char*>(buffers[d]) + offset;
        check(ncclBroadcast(at, at, bytes, ncclUint8, 0, comms[d], streams[d]), "ncclBroadcast");
      }
      check(ncclGroupEnd(), "ncclGroupEnd");
    }
    for (int d = 0; d < gpus; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaStreamSynchronize(streams[d]), "cudaStreamSynchronize");
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  };
  auto median = [&](size_t chunk) {
    std::vector<double> times;
    for (int repeat = 0; repeat < kRepeats; ++repeat) times.push_back(run(chunk));
    std::sort(times.begin(), times.end());
    return times[kRepeats / 2];
  };
  run(total);  // connects
  run(size_t(64) << 20);
  for (int d = 0; d < gpus; ++d) {
    const double nccl = (double(before[d]) - double(freeBytes(d)) - double(total)) / 1048576.0;
    std::printf("GPU %d: NCCL's memory once connected %.0f MiB (besides the %.0f MiB buffer)\n", d, nccl,
                total / 1048576.0);
  }
  const double whole = median(total);
  std::printf("%d GPUs (1 sender, %d receivers), %.0f MiB: one broadcast %.3f ms (%.1f GB/s)\n", gpus, gpus - 1,
              total / 1048576.0, whole, total / whole / 1e6);
  for (int arg = 3; arg < argc; ++arg) {
    const size_t chunk = size_t(std::atoll(argv[arg])) << 20;
    const double chunked = median(chunk);
    std::printf("  in %zu calls of %zu MiB: %.3f ms = %.3fx (%.1f us a call more)\n", (total + chunk - 1) / chunk,
                chunk >> 20, chunked, chunked / whole, (chunked - whole) * 1000.0 / ((total + chunk - 1) / chunk));
  }
  for (int d = 0; d < gpus; ++d) ncclCommDestroy(comms[d]);
  return 0;
}
