// Where an NCCL communicator's GPU memory goes, stage by stage: issue 18 asks for at most 2 buckets of extra memory
// per side, and at 256 MiB buckets NCCL's own memory (818-962 MiB per GPU on 2 x H200, bench/results/
// frontier-2026-11-29-h200x2-9bff7fd.md) is more than that before any staging. Free device memory after each stage:
// the communicators made (ncclCommInitAll, one process driving every GPU); a first broadcast of 4 KiB (NCCL's first
// kernel, and the ring's buffers connected); a first broadcast of 256 MiB; the stack limit set again to what it is
// (the driver may then give back local memory it reserved for a kernel that needed more than the default); the
// communicators destroyed; then made and used again: what stays after the first ones are gone is the process's, paid
// once per process and device by whatever runs NCCL's kernels there first. With WARM, each GPU first runs a
// broadcast on a communicator of its own (one rank) and destroys it, as a process that already used NCCL (a
// PyTorch trainer's process group) would have. Run under NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC to see NCCL's own
// allocations beside it.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o nccl_memory bench/profiles/nccl_memory.cu -lnccl
//   NCCL_NVLS_ENABLE=0 ./nccl_memory GPUS [WARM]
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_check.hpp"

namespace {

using probe::check;

constexpr size_t kSmallBytes = 4096;
constexpr size_t kLargeBytes = size_t(256) << 20;

size_t freeBytes(int device) {
  size_t free = 0, all = 0;
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaMemGetInfo(&free, &all), "cudaMemGetInfo");
  return free;
}

size_t stackLimit(int device) {
  size_t limit = 0;
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaDeviceGetLimit(&limit, cudaLimitStackSize), "cudaDeviceGetLimit");
  return limit;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s GPUS [WARM]\n", argv[0]);
    return 2;
  }
  const int gpus = std::atoi(argv[1]);
  const bool warm = argc > 2 && std::string(argv[2]) == "WARM";
  std::vector<int> devices(gpus);
  std::vector<size_t> previous(gpus);
  std::vector<size_t> start(gpus);
  for (int d = 0; d < gpus; ++d) {
    devices[d] = d;
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaFree(nullptr), "cudaFree");
  }
  // The buffers first, so that every later stage is NCCL's alone.
  std::vector<void*> buffers(gpus);
  std::vector<cudaStream_t> streams(gpus);
  for (int d = 0; d < gpus; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaMalloc(&buffers[d], kLargeBytes), "cudaMalloc");
    check(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking), "cudaStreamCreate");
    start[d] = previous[d] = freeBytes(d);
  }
  std::printf(
      "Each GPU: MiB more in use than at the stage before (since the buffers), CUDA's stack limit.\n\n| stage |");
  for (int d = 0; d < gpus; ++d) std::printf(" GPU %d |", d);
  std::printf("\n|---|");
  for (int d = 0; d < gpus; ++d) std::printf("---|");
  std::printf("\n");
  auto report = [&](const char* stage) {
    std::printf("| %s |", stage);
    for (int d = 0; d < gpus; ++d) {
      const size_t now = freeBytes(d);
      std::printf(" %+.0f (%.0f in all), stack %zu B |", (double(previous[d]) - double(now)) / 1048576.0,
                  (double(start[d]) - double(now)) / 1048576.0, stackLimit(d));
      previous[d] = now;
    }
    std::printf("\n");
  };
  auto broadcastOn = [&](std::vector<ncclComm_t>& comms, size_t bytes) {
    check(ncclGroupStart(), "ncclGroupStart");
    for (size_t d = 0; d < comms.size(); ++d) {
      check(ncclBroadcast(buffers[d], buffers[d], bytes, ncclUint8, 0, comms[d], streams[d]), "ncclBroadcast");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    for (size_t d = 0; d < comms.size(); ++d) {
      check(cudaSetDevice(int(d)), "cudaSetDevice");
      check(cudaStreamSynchronize(streams[d]), "cudaStreamSynchronize");
    }
  };
  auto destroy = [&](std::vector<ncclComm_t>& comms) {
    for (ncclComm_t comm : comms) check(ncclCommDestroy(comm), "ncclCommDestroy");
  };
  if (warm) {
    for (int d = 0; d < gpus; ++d) {
      std::vector<ncclComm_t> own(1);
      check(ncclCommInitAll(own.data(), 1, &devices[d]), "ncclCommInitAll");
      check(cudaSetDevice(d), "cudaSetDevice");
      check(ncclBroadcast(buffers[d], buffers[d], kSmallBytes, ncclUint8, 0, own[0], streams[d]), "ncclBroadcast");
      check(cudaStreamSynchronize(streams[d]), "cudaStreamSynchronize");
      destroy(own);
    }
    report("WARM: a one-rank communicator used and destroyed");
  }
  std::vector<ncclComm_t> comms(gpus);
  check(ncclCommInitAll(comms.data(), gpus, devices.data()), "ncclCommInitAll");
  report("communicators made");
  broadcastOn(comms, kSmallBytes);
  report("first broadcast, 4 KiB");
  broadcastOn(comms, kLargeBytes);
  report("first broadcast, 256 MiB");
  for (int d = 0; d < gpus; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaDeviceSetLimit(cudaLimitStackSize, stackLimit(d)), "cudaDeviceSetLimit");
  }
  report("stack limit set again to itself");
  destroy(comms);
  report("communicators destroyed");
  check(ncclCommInitAll(comms.data(), gpus, devices.data()), "ncclCommInitAll");
  broadcastOn(comms, kLargeBytes);
  report("made again, one broadcast of 256 MiB");
  destroy(comms);
  report("destroyed again");
  return 0;
}
