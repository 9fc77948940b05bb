// Whether NCCL's intra-node user-buffer registration (2.23 and later: ncclCommRegister, peers reading and writing the
// registered buffer itself instead of NCCL's FIFO) takes away what the nccl channel still loses to a raw broadcast:
// each call's fixed ~20 us (bench/profiles/chunked_broadcast.cu) and the broadcasts slowing while the channel's copy
// kernels share the SMs with NCCL's (three receivers, issue 18). The channel could register its staging buffers once
// at open; a trainer's raw broadcast from torch's memory is not registered.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o registered_broadcast bench/profiles/registered_broadcast.cu -lnccl
//   NCCL_NVLS_ENABLE=0 ./registered_broadcast GPUS TOTAL_MIB CHUNK_MIB...
//
// One process per GPU, as the channel's ranks are (fork before CUDA starts; the id and a barrier in shared memory):
// registration between processes goes through CUDA IPC, which one process driving every GPU would not show. For each
// kind of buffer (cudaMalloc unregistered, the baseline; cudaMalloc registered; ncclMemAlloc registered), TOTAL bytes
// go from GPU 0 to the others in one call and then in back-to-back calls of each CHUNK size, in place; then the same
// calls with a copy kernel of 32 blocks (the channel's copies beside a broadcast) running on every receiver beside
// them. The time is from a start common to all ranks to the last rank's stream done, the median of kRepeats. Each
// kind's last round is checked on every receiver (first and last byte). With fewer GPUs than GPUS, the ranks share
// them over NCCL's sockets: a smoke run of the program, not a measurement.
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "probe_check.hpp"

namespace {

using probe::check;

constexpr int kRepeats = 7;
constexpr int kMaxRanks = 8;
constexpr int kCopyBlocks = 32;                   // the channel's copies beside a broadcast of their own size
constexpr std::int64_t kStartLeadNs = 2'000'000;  // the common start lies this far ahead of rank 0's clock
constexpr unsigned char kSent = 0xA5;

enum Kind { kPlain, kMallocRegistered, kNcclMemRegistered, kKinds };
const char* const kKindNames[kKinds] = {"cudaMalloc, unregistered", "cudaMalloc, registered",
                                        "ncclMemAlloc, registered"};

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Shared by every rank's process (MAP_SHARED before fork).
struct Shared {
  ncclUniqueId id;
  std::atomic<int> arrived{0};
  std::atomic<int> generation{0};
  std::atomic<std::int64_t> start{0};
  std::atomic<std::int64_t> ended[kMaxRanks];
  std::atomic<int> failed{0};
};

void barrier(Shared& shared, int ranks) {
  const int generation = shared.generation.load();
  if (shared.arrived.fetch_add(1) + 1 == ranks) {
    shared.arrived.store(0);
    shared.generation.fetch_add(1);
    return;
  }
  while (shared.generation.load() == generation) {}
}

__global__ void copy(uint4* to, const uint4* from, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    to[i] = from[i];
  }
}

struct Buffer {
  void* data = nullptr;
  void* registration = nullptr;
};

void rank(Shared& shared, int me, int ranks, size_t total, const std::vector<size_t>& chunks) {
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices < ranks) {
    // A smoke run on fewer GPUs: ranks share them through NCCL's socket transport, each a host of its own to NCCL
    // (as wsync-bench gpu --nccl-network). Nothing is registered with peers then, and the figures mean nothing.
    if (me == 0) std::printf("only %d GPUs: ranks share them over sockets, a smoke run\n", devices);
    setenv("NCCL_P2P_DISABLE", "1", 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_HOSTID", ("registered-broadcast-" + std::to_string(me)).c_str(), 1);
  }
  check(cudaSetDevice(me % devices), "cudaSetDevice");
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, ranks, shared.id, me), "ncclCommInitRank");
  cudaStream_t stream = nullptr;
  cudaStream_t side = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  Buffer buffers[kKinds];
  for (int kind = 0; kind < kKinds; ++kind) {
    Buffer& buffer = buffers[kind];
    if (kind == kNcclMemRegistered) {
      check(ncclMemAlloc(&buffer.data, total), "ncclMemAlloc");
    } else {
      check(cudaMalloc(&buffer.data, total), "cudaMalloc");
    }
    if (kind != kPlain) check(ncclCommRegister(comm, buffer.data, total, &buffer.registration), "ncclCommRegister");
  }
  // The copy beside the broadcasts: as many bytes as the broadcasts move, on the receivers.
  void* copyFrom = nullptr;
  void* copyTo = nullptr;
  if (me != 0) {
    check(cudaMalloc(&copyFrom, total), "cudaMalloc copy");
    check(cudaMalloc(&copyTo, total), "cudaMalloc copy");
  }
  auto round = [&](int kind, size_t chunk, bool beside) {
    barrier(shared, ranks);
    if (me == 0) shared.start.store(nowNs() + kStartLeadNs);
    barrier(shared, ranks);
    const std::int64_t start = shared.start.load();
    while (nowNs() < start) {}
    if (beside && me != 0) {
      copy<<<kCopyBlocks, 512, 0, side>>>(static_cast<uint4*>(copyTo), static_cast<const uint4*>(copyFrom),
                                          total / sizeof(uint4));
    }
    for (size_t offset = 0; offset < total; offset += chunk) {
      char* at = static_cast<char*>(buffers[kind].data) + offset;
      check(ncclBroadcast(at, at, std::min(chunk, total - offset), ncclUint8, 0, comm, stream), "ncclBroadcast");
    }
    check(cudaStreamSynchronize(stream), "broadcasts");
    shared.ended[me].store(nowNs());
    check(cudaStreamSynchronize(side), "copy");
    barrier(shared, ranks);
    std::int64_t last = start;
    for (int r = 0; r < ranks; ++r) last = std::max(last, shared.ended[r].load());
    return (last - start) / 1e6;
  };
  auto median = [&](int kind, size_t chunk, bool beside) {
    std::vector<double> times;
    for (int repeat = 0; repeat < kRepeats; ++repeat) times.push_back(round(kind, chunk, beside));
    std::sort(times.begin(), times.end());
    return times[kRepeats / 2];
  };
  for (int kind = 0; kind < kKinds; ++kind) {
    check(cudaMemset(buffers[kind].data, me == 0 ? kSent : me, total), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    round(kind, total, false);  // connects, and registers with the peers on first use
    round(kind, size_t(64) << 20, false);
    const double whole = median(kind, total, false);
    const double wholeBeside = median(kind, total, true);
    if (me == 0) {
      std::printf("%s: one broadcast %.3f ms (%.1f GB/s); beside a %d-block copy on each receiver %.3f ms (%.3fx)\n",
                  kKindNames[kind], whole, total / whole / 1e6, kCopyBlocks, wholeBeside, wholeBeside / whole);
    }
    for (size_t chunk : chunks) {
      const size_t calls = (total + chunk - 1) / chunk;
      const double chunked = median(kind, chunk, false);
      const double chunkedBeside = median(kind, chunk, true);
      if (me == 0) {
        std::printf(
            "  in %zu calls of %zu MiB: %.3f ms = %.3fx (%.1f us a call more); beside the copy %.3f ms = "
            "%.3fx\n",
            calls, chunk >> 20, chunked, chunked / whole, (chunked - whole) * 1000.0 / calls, chunkedBeside,
            chunkedBeside / whole);
      }
    }
    if (me != 0) {
      unsigned char first = 0;
      unsigned char lastByte = 0;
      const char* data = static_cast<const char*>(buffers[kind].data);
      check(cudaMemcpy(&first, data, 1, cudaMemcpyDeviceToHost), "cudaMemcpy check");
      check(cudaMemcpy(&lastByte, data + total - 1, 1, cudaMemcpyDeviceToHost), "cudaMemcpy check");
      if (first != kSent || lastByte != kSent) {
        std::fprintf(stderr, "rank %d, %s: holds %#x..%#x, not %#x\n", me, kKindNames[kind], first, lastByte, kSent);
        shared.failed.store(1);
      }
    }
    std::fflush(stdout);
  }
  barrier(shared, ranks);
  for (Buffer& buffer : buffers) {
    if (buffer.registration != nullptr) ncclCommDeregister(comm, buffer.registration);
  }
  check(ncclMemFree(buffers[kNcclMemRegistered].data), "ncclMemFree");
  check(cudaFree(buffers[kPlain].data), "cudaFree");
  check(cudaFree(buffers[kMallocRegistered].data), "cudaFree");
  ncclCommDestroy(comm);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s GPUS TOTAL_MIB CHUNK_MIB...\n", argv[0]);
    return 2;
  }
  const int ranks = std::atoi(argv[1]);
  if (ranks < 2 || ranks > kMaxRanks) {
    std::fprintf(stderr, "GPUS: 2 to %d\n", kMaxRanks);
    return 2;
  }
  const size_t total = size_t(std::atoll(argv[2])) << 20;
  std::vector<size_t> chunks;
  for (int arg = 3; arg < argc; ++arg) chunks.push_back(size_t(std::atoll(argv[arg])) << 20);
  void* mapped = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* shared = new (mapped) Shared();
  // The id's bootstrap root lives in the process that made it: rank 0, which stays this process.
  check(ncclGetUniqueId(&shared->id), "ncclGetUniqueId");
  std::printf("%d GPUs (1 sender, %d receivers), %.0f MiB, NCCL %d, one process per GPU:\n", ranks, ranks - 1,
              total / 1048576.0, NCCL_VERSION_CODE);
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int r = 1; r < ranks; ++r) {
    const pid_t child = fork();
    if (child == 0) {
      rank(*shared, r, ranks, total, chunks);
      std::_Exit(0);
    }
    children.push_back(child);
  }
  rank(*shared, 0, ranks, total, chunks);
  bool ok = shared->failed.load() == 0;
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::printf("%s\n", ok ? "every receiver holds the sender's bytes" : "FAILED");
  return ok ? 0 : 1;
}
