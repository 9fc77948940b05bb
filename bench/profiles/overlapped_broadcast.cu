// Whether two communicators taking turns hide each broadcast call's fixed cost. One raw ncclBroadcast of TOTAL bytes
// from GPU 0 to GPUs 1..N-1, then back-to-back calls of each CHUNK size on one communicator (what the nccl channel
// does: 17-21 us a call, chunked_broadcast.cu), then the same calls alternating between two communicators of the same
// GPUs on two streams, so that one call's fill and drain overlap the other's middle. The nccl channel cannot share
// one communicator's resources between two calls at once (splitShare), so the second communicator's GPU memory is
// printed beside: its cost against issue 18's 2 buckets per side.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o overlapped_broadcast bench/profiles/overlapped_broadcast.cu -lnccl
//   NCCL_NVLS_ENABLE=0 ./overlapped_broadcast GPUS TOTAL_MIB CHUNK_MIB...
//
// One process drives every GPU (ncclCommInitAll, one group per call); the time is the host's, from the first call to
// every stream done, the median of kRepeats.
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

size_t usedOnGpu0() {
  size_t free = 0;
  size_t total = 0;
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s GPUS TOTAL_MIB CHUNK_MIB...\n", argv[0]);
    return 2;
  }
  const int gpus = std::atoi(argv[1]);
  const size_t total = size_t(std::atoll(argv[2])) << 20;
  std::vector<int> devices(gpus);
  for (int d = 0; d < gpus; ++d) devices[d] = d;
  std::vector<void*> buffers(gpus);
  std::vector<cudaStream_t> streams[2] = {std::vector<cudaStream_t>(gpus), std::vector<cudaStream_t>(gpus)};
  for (int d = 0; d < gpus; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaMalloc(&buffers[d], total), "cudaMalloc");
    check(cudaMemset(buffers[d], d, total), "cudaMemset");
    for (auto& perComm : streams) check(cudaStreamCreateWithFlags(&perComm[d], cudaStreamNonBlocking), "stream");
  }
  std::vector<ncclComm_t> comms[2] = {std::vector<ncclComm_t>(gpus), std::vector<ncclComm_t>(gpus)};
  size_t used[3] = {usedOnGpu0(), 0, 0};
  check(ncclCommInitAll(comms[0].data(), gpus, devices.data()), "ncclCommInitAll");
  used[1] = usedOnGpu0();
  check(ncclCommInitAll(comms[1].data(), gpus, devices.data()), "ncclCommInitAll (second)");
  used[2] = usedOnGpu0();

  auto call = [&](int which, size_t offset, size_t bytes) {
    check(ncclGroupStart(), "ncclGroupStart");
    for (int d = 0; d < gpus; ++d) {
      char* at = static_cast<char*>(buffers[d]) + offset;
      check(ncclBroadcast(at, at, bytes, ncclUint8, 0, comms[which][d], streams[which][d]), "ncclBroadcast");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  };
  // `communicators` 1: every call on the first; 2: calls alternate between the two (and their streams).
  auto run = [&](size_t chunk, int communicators) {
    const auto begin = std::chrono::steady_clock::now();
    int index = 0;
    for (size_t offset = 0; offset < total; offset += chunk, ++index)
      call(index % communicators, offset, std::min(chunk, total - offset));
    for (int d = 0; d < gpus; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      for (auto& perComm : streams) check(cudaStreamSynchronize(perComm[d]), "cudaStreamSynchronize");
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  };
  auto median = [&](size_t chunk, int communicators) {
    std::vector<double> times;
    for (int repeat = 0; repeat < kRepeats; ++repeat) times.push_back(run(chunk, communicators));
    std::sort(times.begin(), times.end());
    return times[kRepeats / 2];
  };
  run(total, 1);  // connects each communicator
  run(size_t(64) << 20, 2);
  const double whole = median(total, 1);
  std::printf(
      "%d GPUs (1 sender, %d receivers), %.0f MiB: one broadcast %.3f ms (%.1f GB/s); GPU 0 memory: first "
      "communicator %.0f MiB, second %.0f MiB\n",
      gpus, gpus - 1, total / 1048576.0, whole, total / whole / 1e6, (used[1] - used[0]) / 1048576.0,
      (used[2] - used[1]) / 1048576.0);
  for (int arg = 3; arg < argc; ++arg) {
    const size_t chunk = size_t(std::atoll(argv[arg])) << 20;
    const double one = median(chunk, 1);
    const double two = median(chunk, 2);
    std::printf("  %zu calls of %zu MiB: one communicator %.3f ms = %.3fx, two taking turns %.3f ms = %.3fx\n",
                (total + chunk - 1) / chunk, chunk >> 20, one, one / whole, two, two / whole);
  }
  for (auto& perComm : comms) {
    for (ncclComm_t comm : perComm) ncclCommDestroy(comm);
  }
  return 0;
}
