// What the first ncclBroadcast after an idle gap costs, and whether a tiny broadcast ahead of it (a primer) takes
// that cost while the sender would be packing. The nccl channel's timeline showed every transfer's first 64 MiB
// slice taking 0.16-0.33 ms more than the same slice later in the transfer, on every rank, with the ranks ready.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o first_broadcast bench/profiles/first_broadcast.cu -lnccl
//   NCCL_NVLS_ENABLE=0 ./first_broadcast GPUS IDLE_MS
//
// One process drives every GPU (ncclCommInitAll, one group per call). Each case sleeps IDLE_MS (the GPUs idle, as
// between update rounds), then broadcasts 1 GiB from GPU 0 in calls of 64 MiB, each call bracketed by CUDA events
// on every GPU. It prints, per GPU, the first call's time, the second's, the median of the rest, and the whole span
// from the first call's start, medians over kRepeats:
//   plain:        the 64 MiB calls;
//   primer:       a 4 KiB broadcast first (not timed in the span), then the calls;
//   primer+wait:  the primer, then 100 us of a kernel on GPU 0 (the sender's first pack), then the calls;
//   whole:        one call of 1 GiB (the raw broadcast), for the span.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "probe_check.hpp"

namespace {

using probe::check;

constexpr int kRepeats = 9;
constexpr size_t kTotal = size_t(1) << 30;
constexpr size_t kChunk = size_t(64) << 20;
constexpr size_t kPrimerBytes = 4096;

// Spins about `cycles` clock cycles: the stand-in for the sender's first pack.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s GPUS IDLE_MS\n", argv[0]);
    return 2;
  }
  const int gpus = std::atoi(argv[1]);
  const int idleMs = std::atoi(argv[2]);
  std::vector<ncclComm_t> comms(gpus);
  std::vector<int> devices(gpus);
  for (int d = 0; d < gpus; ++d) devices[d] = d;
  check(ncclCommInitAll(comms.data(), gpus, devices.data()), "ncclCommInitAll");
  const int calls = int(kTotal / kChunk);
  std::vector<void*> buffers(gpus);
  std::vector<cudaStream_t> streams(gpus);
  std::vector<std::vector<cudaEvent_t>> events(gpus, std::vector<cudaEvent_t>(calls + 1));
  int clockKhz = 0;
  check(cudaDeviceGetAttribute(&clockKhz, cudaDevAttrClockRate, 0), "cudaDeviceGetAttribute");
  for (int d = 0; d < gpus; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaMalloc(&buffers[d], kTotal), "cudaMalloc");
    check(cudaMemset(buffers[d], d, kTotal), "cudaMemset");
    check(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking), "cudaStreamCreate");
    for (cudaEvent_t& event : events[d]) check(cudaEventCreate(&event), "cudaEventCreate");
  }
  auto group = [&](size_t offset, size_t bytes) {
    check(ncclGroupStart(), "ncclGroupStart");
    for (int d = 0; d < gpus; ++d) {
      char* at = static_cast<char*>(buffers[d]) + offset;
      check(ncclBroadcast(at, at, bytes, ncclUint8, 0, comms[d], streams[d]), "ncclBroadcast");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  };
  auto record = [&](int index) {
    for (int d = 0; d < gpus; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaEventRecord(events[d][index], streams[d]), "cudaEventRecord");
    }
  };
  auto synchronize = [&] {
    for (int d = 0; d < gpus; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaStreamSynchronize(streams[d]), "cudaStreamSynchronize");
    }
  };
  // One case: per GPU, {first call, second call, median of the rest, span}.
  auto run = [&](const std::string& mode) {
    std::vector<std::vector<std::vector<double>>> samples(gpus, std::vector<std::vector<double>>(4));
    for (int repeat = 0; repeat < kRepeats; ++repeat) {
      std::this_thread::sleep_for(std::chrono::milliseconds(idleMs));
      if (mode != "plain" && mode != "whole") group(0, kPrimerBytes);
      if (mode == "primer+wait") {
        check(cudaSetDevice(0), "cudaSetDevice");
        spin<<<1, 1, 0, streams[0]>>>(static_cast<long long>(clockKhz) * 100 / 1000);
        check(cudaGetLastError(), "spin");
      }
      record(0);
      if (mode == "whole") {
        group(0, kTotal);
        record(calls);
      } else {
        for (int call = 0; call < calls; ++call) {
          group(size_t(call) * kChunk, kChunk);
          record(call + 1);
        }
      }
      synchronize();
      for (int d = 0; d < gpus; ++d) {
        auto between = [&](int from, int to) {
          float ms = 0;
          check(cudaEventElapsedTime(&ms, events[d][from], events[d][to]), "cudaEventElapsedTime");
          return double(ms);
        };
        if (mode == "whole") {
          samples[d][3].push_back(between(0, calls));
          continue;
        }
        samples[d][0].push_back(between(0, 1));
        samples[d][1].push_back(between(1, 2));
        std::vector<double> rest;
        for (int call = 2; call < calls; ++call) rest.push_back(between(call, call + 1));
        samples[d][2].push_back(median(rest));
        samples[d][3].push_back(between(0, calls));
      }
    }
    for (int d = 0; d < gpus; ++d) {
      if (mode == "whole") {
        std::printf("  %-12s GPU %d: span %.3f ms\n", mode.c_str(), d, median(samples[d][3]));
      } else {
        std::printf("  %-12s GPU %d: first %.3f ms, second %.3f ms, others %.3f ms, span %.3f ms\n", mode.c_str(), d,
                    median(samples[d][0]), median(samples[d][1]), median(samples[d][2]), median(samples[d][3]));
      }
    }
  };
  group(0, kTotal);  // connects
  synchronize();
  std::printf("%d GPUs, 1 GiB in calls of 64 MiB, %d ms idle before each of %d repeats\n", gpus, idleMs, kRepeats);
  for (const char* mode : {"plain", "primer", "primer+wait", "whole", "plain"}) run(mode);
  for (int d = 0; d < gpus; ++d) ncclCommDestroy(comms[d]);
  return 0;
}
