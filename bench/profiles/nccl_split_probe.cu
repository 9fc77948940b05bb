// Probe for issue 18's next step: can the nccl channel keep a non-blocking communicator for joining and connecting
// (where only a non-blocking one can time out) and enqueue its broadcasts through a blocking one (NCCL enqueues a
// non-blocking communicator's every broadcast from a thread of its own: 0.1-0.4 ms a call, which the first broadcast
// of each transfer waits out)? Two ranks, one thread and one GPU each, in one process:
//   1. a non-blocking communicator joins (polled) and broadcasts (each call's and settling's host time);
//   2. ncclCommSplit of it into a child with blocking = 1 and splitShare = 1: what the split returns (ncclInProgress
//      means it can be polled, and so time out), the GPU memory it takes, and whether the child's first broadcast
//      connects again;
//   3. the child's broadcast calls' host time;
//   4. a stuck peer: rank 1 joins the child's next broadcast 2 s late; rank 0 reports whether its blocking call
//      waited for it, aborts the child after 300 ms and says how long the abort and the stream's drain took (rank 1
//      does the same with its own, now lone, broadcast), and whether the parent still broadcasts afterwards.
// Not built by CMake:
//   nvcc -O2 -std=c++17 -arch=sm_90 -o nccl_split_probe bench/profiles/nccl_split_probe.cu -lnccl -lpthread
//   ./nccl_split_probe [MIB]        2 GPUs, a thread each
//   ./nccl_split_probe MIB fork     1 GPU: two processes on it through NCCL's sockets, each its own NCCL host (the
//                                   GPU tests' OneGpuOverSockets placement)
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using Clock = std::chrono::steady_clock;
static double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

#define CK(x)                                                            \
  do {                                                                   \
    cudaError_t e = (x);                                                 \
    if (e != cudaSuccess) {                                              \
      std::printf("rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)
#define NK(x)                                                              \
  do {                                                                     \
    ncclResult_t nk_ = (x);                                                \
    if (nk_ != ncclSuccess && nk_ != ncclInProgress) {                     \
      std::printf("rank %d: %s: %s\n", rank, #x, ncclGetErrorString(nk_)); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

// Polls a non-blocking communicator until its last call settled; returns the settling's milliseconds.
static double settle(int rank, ncclComm_t comm, ncclResult_t first) {
  const auto t = Clock::now();
  ncclResult_t state = first;
  while (state == ncclInProgress) {
    std::this_thread::yield();
    ncclCommGetAsyncError(comm, &state);
  }
  if (state != ncclSuccess) {
    std::printf("rank %d: settle: %s\n", rank, ncclGetErrorString(state));
    std::exit(1);
  }
  return msSince(t);
}

static size_t freeMemory(int rank) {
  size_t f = 0, t = 0;
  CK(cudaMemGetInfo(&f, &t));
  return f;
}

static void run(int rank, int device, ncclUniqueId id, size_t bytes) {
  CK(cudaSetDevice(device));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* buffer;
  CK(cudaMalloc(&buffer, bytes));
  CK(cudaDeviceSynchronize());
  const size_t before = freeMemory(rank);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t parent = nullptr;
  auto t = Clock::now();
  ncclResult_t r = ncclCommInitRankConfig(&parent, 2, id, rank, &config);
  NK(r);
  settle(rank, parent, r);
  std::printf("rank %d: non-blocking init %.1f ms\n", rank, msSince(t));

  auto broadcasts = [&](ncclComm_t comm, const char* what, int count) {
    for (int i = 0; i < count; ++i) {
      const auto called = Clock::now();
      const ncclResult_t result = ncclBroadcast(buffer, buffer, bytes, ncclUint8, 0, comm, stream);
      NK(result);
      const double callMs = msSince(called);
      const double settleMs = settle(rank, comm, result);
      CK(cudaStreamSynchronize(stream));
      std::printf("rank %d: %s broadcast %d: returned %s, call %.3f ms, settle %.3f ms, to done %.3f ms\n", rank, what,
                  i, result == ncclInProgress ? "InProgress" : "Success", callMs, settleMs, msSince(called));
    }
  };
  broadcasts(parent, "parent", 4);
  const size_t afterParent = freeMemory(rank);

  ncclConfig_t childConfig = NCCL_CONFIG_INITIALIZER;
  // SPLIT_SHARE=0 / CHILD_BLOCKING=0 try the other combinations (NCCL 2.28.3 refused blocking = 1, splitShare = 1
  // under a non-blocking parent: ncclInvalidArgument, 2026-11-28).
  childConfig.blocking = std::getenv("CHILD_BLOCKING") ? std::atoi(std::getenv("CHILD_BLOCKING")) : 1;
  childConfig.splitShare = std::getenv("SPLIT_SHARE") ? std::atoi(std::getenv("SPLIT_SHARE")) : 1;
  std::printf("rank %d: child config blocking %d splitShare %d\n", rank, childConfig.blocking, childConfig.splitShare);
  ncclComm_t child = nullptr;
  t = Clock::now();
  r = ncclCommSplit(parent, 0, rank, &child, &childConfig);
  const double splitCall = msSince(t);
  if (r != ncclSuccess && r != ncclInProgress) {
    std::printf("rank %d: ncclCommSplit: %s (%s)\n", rank, ncclGetErrorString(r), ncclGetLastError(parent));
    ncclCommAbort(parent);
    return;
  }
  const double splitSettle = r == ncclInProgress ? settle(rank, parent, r) : 0.0;
  // Under a non-blocking parent NCCL may fill the child in from its own thread after the call returned (seen
  // 2026-11-28: ncclSuccess and a null child right after the call): wait up to 10 s for it to appear.
  const auto waited = Clock::now();
  while (__atomic_load_n(&child, __ATOMIC_ACQUIRE) == nullptr && msSince(waited) < 10000) std::this_thread::yield();
  std::printf("rank %d: the child %s after %.3f ms\n", rank, child != nullptr ? "appeared" : "did not appear",
              msSince(waited));
  if (child == nullptr) {
    std::printf("rank %d: ncclCommSplit returned %s but no child\n", rank, ncclGetErrorString(r));
    ncclCommAbort(parent);
    return;
  }
  if (child != nullptr) {
    ncclResult_t childState = ncclSuccess;
    ncclCommGetAsyncError(child, &childState);
    while (childState == ncclInProgress) {
      std::this_thread::yield();
      ncclCommGetAsyncError(child, &childState);
    }
  }
  std::printf("rank %d: split returned %s after %.3f ms, settled %.3f ms later, child %p\n", rank,
              r == ncclInProgress ? "InProgress" : "Success", splitCall, splitSettle, static_cast<void*>(child));
  const size_t afterSplit = freeMemory(rank);
  broadcasts(child, "child", 6);
  const size_t afterChild = freeMemory(rank);
  broadcasts(parent, "parent again", 2);
  std::printf("rank %d: GPU memory: parent communicator %.1f MiB, split %.1f MiB, child's broadcasts %.1f MiB\n", rank,
              (before - afterParent) / 1048576.0, (afterParent - afterSplit) / 1048576.0,
              (afterSplit - afterChild) / 1048576.0);

  // 4. A stuck peer on the blocking child.
  if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto called = Clock::now();
  const ncclResult_t late = ncclBroadcast(buffer, buffer, bytes, ncclUint8, 0, child, stream);
  std::printf("rank %d: child broadcast with the peer %s: the call returned %s after %.3f ms\n", rank,
              rank == 0 ? "2 s late" : "gone", ncclGetErrorString(late), msSince(called));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const bool done = cudaStreamQuery(stream) == cudaSuccess;
  const auto aborting = Clock::now();
  ncclCommAbort(child);
  const double abortMs = msSince(aborting);
  cudaError_t drained = cudaErrorNotReady;
  while (msSince(aborting) < 5000 && (drained = cudaStreamQuery(stream)) == cudaErrorNotReady)
    std::this_thread::yield();
  std::printf(
      "rank %d: after 300 ms the broadcast was %s; ncclCommAbort(child) took %.3f ms; the stream %s after "
      "%.3f ms\n",
      rank, done ? "done" : "pending", abortMs, cudaGetErrorString(drained), msSince(aborting));
  cudaGetLastError();
  // Whether the parent, which shared its resources with the aborted child, still works (both ranks, with a bound).
  const auto again = Clock::now();
  const ncclResult_t parentCall = ncclBroadcast(buffer, buffer, bytes, ncclUint8, 0, parent, stream);
  ncclResult_t state = parentCall;
  while (state == ncclInProgress && msSince(again) < 5000) {
    std::this_thread::yield();
    ncclCommGetAsyncError(parent, &state);
  }
  cudaError_t finished = cudaErrorNotReady;
  while (state == ncclSuccess && msSince(again) < 5000 && (finished = cudaStreamQuery(stream)) == cudaErrorNotReady) {
    std::this_thread::yield();
  }
  std::printf("rank %d: the parent after the child's abort: call %s, state %s, stream %s (%.3f ms)\n", rank,
              ncclGetErrorString(parentCall), ncclGetErrorString(state), cudaGetErrorString(finished), msSince(again));
  ncclCommAbort(parent);
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out before a crash
  int rank = -1;
  int devices = 1;
  // Processes fork before CUDA starts (a child cannot use a context its parent made).
  const bool forked = argc > 2 && std::string(argv[2]) == "fork";
  if (!forked) CK(cudaGetDeviceCount(&devices));
  std::printf("broadcasts of %zu MiB, %s\n", mib,
              forked ? "one GPU, two processes over NCCL's sockets" : "two GPUs, a thread each");
  std::fflush(stdout);
  if (!forked) {
    if (devices < 2) {
      std::printf("needs 2 GPUs (or 'fork')\n");
      return 0;
    }
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) ranks.emplace_back(run, r, r, id, mib << 20);
    for (auto& thread : ranks) thread.join();
    return 0;
  }
  int pipeFds[2];
  if (pipe(pipeFds) != 0) return 1;
  const pid_t child = fork();
  rank = child == 0 ? 1 : 0;
  setenv("NCCL_HOSTID", ("split-probe-" + std::to_string(rank)).c_str(), 1);
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  ncclUniqueId id;
  if (rank == 0) {
    ncclGetUniqueId(&id);
    if (write(pipeFds[1], &id, sizeof id) != sizeof id) return 1;
  } else if (read(pipeFds[0], &id, sizeof id) != sizeof id) {
    return 1;
  }
  run(rank, 0, id, mib << 20);
  std::fflush(stdout);
  if (child != 0) waitpid(child, nullptr, 0);
  return 0;
}
