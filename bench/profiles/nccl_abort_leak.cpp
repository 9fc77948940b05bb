// Reproduces, with raw NCCL and nothing of wsync's, the leak LeakSanitizer found in the GPU tests on 2 x H200
// (2026-11-29, 76a18cd; tests/lsan.supp): the nccl channel's layout, a non-blocking communicator joined and split into
// a blocking child that shares its resources (splitShare = 1), whose first broadcast blocks while it connects to a
// peer that never comes. Another thread aborts the parent (the child shares its abort flag, so the blocked call
// returns), then the child is aborted too, and the process exits cleanly for LeakSanitizer to look.
//   late: the peer takes part in the child's first broadcast and freezes before its second, which is then the
//         blocked one (the GPU tests' later-round faults, which were clean).
// Two processes, a GPU each. Not built by CMake; built under ASan on the Debian machine and run on a GPU machine:
//   g++ -std=c++20 -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -I/usr/local/cuda/include
//       -o nccl_abort_leak bench/profiles/nccl_abort_leak.cpp -L/usr/local/cuda/lib64 -lcudart_static -lnccl
//       -ldl -lrt -lpthread
//   ASAN_OPTIONS=protect_shadow_gap=0 ./nccl_abort_leak [first|late]
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;
// How long rank 0 lets the blocked broadcast wait before it aborts: the channel's guard does the same at its stall
// timeout (3 s in the GPU tests' fault cases).
constexpr auto kAbortAfter = std::chrono::seconds(2);
// How long the frozen peer stays frozen: longer than rank 0 needs to abort, report and exit.
constexpr auto kFrozenFor = std::chrono::seconds(15);
constexpr size_t kBytes = 64u << 20;

int rank = -1;

void check(cudaError_t result, const char* call) {
  if (result == cudaSuccess) return;
  std::printf("rank %d: %s: %s\n", rank, call, cudaGetErrorString(result));
  std::exit(1);
}

void check(ncclResult_t result, const char* call) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  std::printf("rank %d: %s: %s\n", rank, call, ncclGetErrorString(result));
  std::exit(1);
}

void settle(ncclComm_t comm, const char* call) {
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    std::this_thread::yield();
    ncclCommGetAsyncError(comm, &state);
  }
  check(state, call);
}

void run(const ncclUniqueId& id, bool late) {
  check(cudaSetDevice(rank), "cudaSetDevice");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  void* buffer = nullptr;
  check(cudaMalloc(&buffer, kBytes), "cudaMalloc");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.splitShare = 1;
  ncclComm_t parent = nullptr;
  check(ncclCommInitRankConfig(&parent, 2, id, rank, &config), "ncclCommInitRankConfig");
  settle(parent, "ncclCommInitRankConfig");

  ncclConfig_t childConfig = NCCL_CONFIG_INITIALIZER;
  childConfig.blocking = 1;
  ncclComm_t child = nullptr;
  check(ncclCommSplit(parent, 0, rank, &child, &childConfig), "ncclCommSplit");
  // Under a non-blocking parent NCCL writes the child from a thread of its own after the call returned.
  std::atomic_ref<ncclComm_t> childRef(child);
  while (childRef.load(std::memory_order_acquire) == nullptr) std::this_thread::yield();
  settle(child, "ncclCommSplit (child)");
  std::printf("rank %d: parent joined, child split\n", rank);

  if (late) {
    check(ncclBroadcast(buffer, buffer, kBytes, ncclUint8, 0, child, stream), "ncclBroadcast (first)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::printf("rank %d: the first broadcast done\n", rank);
  }
  if (rank == 1) {
    std::printf("rank 1: frozen before the %s broadcast\n", late ? "second" : "first");
    std::fflush(stdout);
    std::this_thread::sleep_for(kFrozenFor);
    _exit(0);
  }

  std::atomic<bool> returned{false};
  ncclResult_t blocked = ncclSuccess;
  std::thread caller([&] {
    blocked = ncclBroadcast(buffer, buffer, kBytes, ncclUint8, 0, child, stream);
    returned = true;
  });
  std::this_thread::sleep_for(kAbortAfter);
  std::printf("rank 0: after %lld s the blocking broadcast has %s; aborting the parent\n",
              static_cast<long long>(kAbortAfter.count()), returned ? "returned" : "not returned");
  const auto aborting = Clock::now();
  ncclCommAbort(parent);
  caller.join();
  std::printf("rank 0: the blocked call returned %s, %.1f ms after the abort began\n", ncclGetErrorString(blocked),
              std::chrono::duration<double, std::milli>(Clock::now() - aborting).count());
  ncclCommAbort(child);
  const auto draining = Clock::now();
  while (cudaStreamQuery(stream) == cudaErrorNotReady && Clock::now() - draining < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cudaGetLastError();
  cudaFree(buffer);
  cudaStreamDestroy(stream);
  std::printf("rank 0: both communicators aborted; exiting for LeakSanitizer\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool late = argc > 1 && std::string(argv[1]) == "late";
  int pipeFds[2];
  if (pipe(pipeFds) != 0) return 1;
  // Fork before CUDA starts: a child cannot use a context its parent made.
  const pid_t peer = fork();
  rank = peer == 0 ? 1 : 0;
  ncclUniqueId id;
  if (rank == 0) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (write(pipeFds[1], &id, sizeof id) != sizeof id) return 1;
  } else if (read(pipeFds[0], &id, sizeof id) != sizeof id) {
    return 1;
  }
  std::printf("rank %d: pid %d, the blocked broadcast is the %s\n", rank, getpid(), late ? "second" : "first");
  run(id, late);
  // The frozen peer is killed rather than waited for: rank 0's report is what counts.
  if (peer != 0) kill(peer, SIGKILL), waitpid(peer, nullptr, 0);
  return 0;
}
