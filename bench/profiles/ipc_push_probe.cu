// Whether the sender's process copying into the receiver's memory (push) avoids the 0.11-0.14 ms that cuda_ipc loses
// on one GPU when the receiver's process copies from the sender's (pull, what the channel does): the GPU switching
// from the sender's context, which last ran (it wrote the new weights), to the receiver's. Under MPS both share one
// context and the loss goes (bench/results/frontier-2026-11-28-h200x2.md); push would not need the daemon.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o ipc_push_probe bench/profiles/ipc_push_probe.cu -lcuda
//   ./ipc_push_probe MIB
//
// Two processes on GPU 0 (fork before CUDA starts): the sender owns `src`, the receiver `dst`, each exported to the
// other with cudaIpcGetMemHandle. Every round the sender writes `src` anew with a kernel and waits for it, then takes
// the time and starts the round. The round ends when the receiver's host sees the copy done:
//   pull:    the receiver launches a copy from the sender's `src` into `dst`, then a one-thread kernel that writes the
//            round's number into its pinned, mapped host memory; it spins on that word;
//   push:    the sender launches a copy from `src` into the receiver's `dst`, then the same one-thread kernel, writing
//            into a page both processes map (registered in the sender with cudaHostRegister); the receiver spins on it;
//   memcpy:  the sender alone, cudaMemcpyAsync of `src` into a buffer of its own, then the one-thread kernel into its
//            pinned memory (the channel's baseline, as wsync-bench gpu times it);
//   prewait: pull, but the receiver enqueued the copy before the round, behind cuStreamWaitValue64 on the shared
//            page, which the sender's host writes to start the round: no wake-up or launch in between, and the wait
//            pending in the receiver's context while the sender writes its weights (whose time is printed, to see
//            whether a pending wait slows the trainer).
// Then, in every mode, the receiver launches one kernel of its own and waits for it: the engine's next step. Pull
// already runs in the receiver's context; push and memcpy leave the GPU in the sender's, so this shows whether a
// push removes the switch between contexts or only moves it after the transfer, where the engine pays it.
// It prints each mode's medians over kRounds, and checks that the last round's bytes arrived.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.hpp"

namespace {

using probe::check;

constexpr int kRounds = 30;
constexpr int kModes = 4;
const char* const kModeNames[kModes] = {"pull", "push", "memcpy", "prewait"};

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Shared by both processes (MAP_SHARED before fork). `flag` has a page of its own: the sender registers it.
struct alignas(4096) Control {
  std::atomic<int> exported{0};        // 1: src exported, 2: dst exported too
  std::atomic<std::int64_t> go{-1};    // the round the sender started (mode * kRounds + round)
  std::atomic<std::int64_t> seen{-1};  // the round the receiver saw done
  std::atomic<int> quit{0};
  cudaIpcMemHandle_t srcHandle{};
  cudaIpcMemHandle_t dstHandle{};
  std::int64_t started[kModes][kRounds]{};
  std::int64_t ended[kModes][kRounds]{};
  std::int64_t resumed[kModes][kRounds]{};  // the receiver's own next kernel seen done
  std::atomic<std::int64_t> copied{-1};     // memcpy mode: the round whose copy the sender saw done
  std::int64_t filled[kModes][kRounds]{};   // the sender's weights kernel, launch to seen done (ns)
};
struct alignas(4096) FlagPage {
  volatile std::int64_t flag;
};

__global__ void fill(uint4* data, size_t count, std::uint32_t value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    data[i] = make_uint4(value, value ^ std::uint32_t(i), value + 1, std::uint32_t(i >> 32));
  }
}

__global__ void copy(uint4* to, const uint4* from, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    to[i] = from[i];
  }
}

__global__ void signal(volatile std::int64_t* flag, std::int64_t value) {
  __threadfence_system();
  *flag = value;
  __threadfence_system();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void spinUntil(const volatile std::int64_t* word, std::int64_t value) {
  while (*word != value) {}
}

int copyBlocks() {
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  return sms * 8;
}

void receiver(Control& control, FlagPage& shared, size_t bytes) {
  check(cudaSetDevice(0), "cudaSetDevice");
  void* dst = nullptr;
  check(cudaMalloc(&dst, bytes), "cudaMalloc dst");
  check(cudaIpcGetMemHandle(&control.dstHandle, dst), "cudaIpcGetMemHandle dst");
  while (control.exported.load() != 1) {}
  void* src = nullptr;
  check(cudaIpcOpenMemHandle(&src, control.srcHandle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle src");
  control.exported.store(2);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::int64_t* pinned = nullptr;
  check(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(std::int64_t), cudaHostAllocMapped), "cudaHostAlloc");
  *pinned = -1;
  std::int64_t* pinnedOnDevice = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&pinnedOnDevice), pinned, 0), "cudaHostGetDevicePointer");
  const size_t count = bytes / sizeof(uint4);
  // The receiver's own step marks are negative, apart from the copies' round ids.
  const auto nextStep = [&](std::int64_t id) {
    signal<<<1, 1, 0, stream>>>(pinnedOnDevice, -2 - id);
    spinUntil(pinned, -2 - id);
  };
  // prewait: the round's copy is enqueued before the round starts, behind a wait on the shared page that the sender
  // writes from its host when it starts the round: no wake-up and no launch between the start and the copy.
  check(cudaHostRegister(&shared, sizeof(FlagPage), cudaHostRegisterMapped), "cudaHostRegister receiver");
  std::int64_t* flagOnDevice = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flagOnDevice), const_cast<std::int64_t*>(&shared.flag), 0),
        "cudaHostGetDevicePointer flag");
  const auto prepost = [&](std::int64_t id) {
    const CUresult waited = cuStreamWaitValue64(stream, reinterpret_cast<CUdeviceptr>(flagOnDevice),
                                                static_cast<cuuint64_t>(id), CU_STREAM_WAIT_VALUE_EQ);
    if (waited != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuStreamWaitValue64: error %d\n", static_cast<int>(waited));
      std::exit(1);
    }
    copy<<<copyBlocks(), 256, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), count);
    signal<<<1, 1, 0, stream>>>(pinnedOnDevice, id);
  };
  for (int mode = 0; mode < kModes; ++mode) {
    for (int round = 0; round < kRounds; ++round) {
      const std::int64_t id = mode * kRounds + round;
      if (mode == 3 && round == 0) prepost(id);  // later rounds were posted at the end of the one before
      while (control.go.load(std::memory_order_acquire) != id) {}
      if (mode == 3) {
        spinUntil(pinned, id);
        control.ended[mode][round] = nowNs();
      } else if (mode == 0) {
        copy<<<copyBlocks(), 256, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), count);
        signal<<<1, 1, 0, stream>>>(pinnedOnDevice, id);
        spinUntil(pinned, id);
        control.ended[mode][round] = nowNs();
      } else if (mode == 1) {
        spinUntil(&shared.flag, id);
        control.ended[mode][round] = nowNs();
      } else {
        while (control.copied.load(std::memory_order_acquire) != id) {}
      }
      nextStep(id);
      control.resumed[mode][round] = nowNs();
      if (mode == 3 && round + 1 < kRounds) prepost(id + 1);  // pending while the sender writes its next weights
      control.seen.store(id, std::memory_order_release);
    }
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  // The last round that wrote dst was prewait's round 4 * kRounds - 1: the first words must say so.
  uint4 first{};
  check(cudaMemcpy(&first, dst, sizeof(first), cudaMemcpyDeviceToHost), "cudaMemcpy check");
  if (first.x != std::uint32_t(4 * kRounds - 1)) {
    std::fprintf(stderr, "receiver: dst holds round %u, not %d\n", first.x, 4 * kRounds - 1);
    std::exit(1);
  }
  while (control.quit.load() == 0) {}
  check(cudaIpcCloseMemHandle(src), "cudaIpcCloseMemHandle");
  check(cudaHostUnregister(&shared), "cudaHostUnregister receiver");
}

void sender(Control& control, FlagPage& shared, size_t bytes) {
  check(cudaSetDevice(0), "cudaSetDevice");
  void* src = nullptr;
  void* local = nullptr;
  check(cudaMalloc(&src, bytes), "cudaMalloc src");
  check(cudaMalloc(&local, bytes), "cudaMalloc local");
  check(cudaIpcGetMemHandle(&control.srcHandle, src), "cudaIpcGetMemHandle src");
  control.exported.store(1);
  while (control.exported.load() != 2) {}
  void* dst = nullptr;
  check(cudaIpcOpenMemHandle(&dst, control.dstHandle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle dst");
  check(cudaHostRegister(&shared, sizeof(FlagPage), cudaHostRegisterMapped), "cudaHostRegister");
  std::int64_t* sharedOnDevice = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sharedOnDevice), const_cast<std::int64_t*>(&shared.flag), 0),
        "cudaHostGetDevicePointer shared");
  std::int64_t* pinned = nullptr;
  check(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(std::int64_t), cudaHostAllocMapped), "cudaHostAlloc");
  *pinned = -1;
  std::int64_t* pinnedOnDevice = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&pinnedOnDevice), pinned, 0), "cudaHostGetDevicePointer");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const size_t count = bytes / sizeof(uint4);
  for (int mode = 0; mode < kModes; ++mode) {
    for (int round = 0; round < kRounds; ++round) {
      const std::int64_t id = mode * kRounds + round;
      // New weights, written in the sender's context: that context last ran when the round starts.
      const std::int64_t fillStart = nowNs();
      fill<<<copyBlocks(), 256, 0, stream>>>(static_cast<uint4*>(src), count, std::uint32_t(id));
      check(cudaStreamSynchronize(stream), "fill");
      control.started[mode][round] = nowNs();
      control.filled[mode][round] = control.started[mode][round] - fillStart;
      if (mode == 3) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        shared.flag = id;  // the receiver's pending wait reads it: the round starts here
        std::atomic_thread_fence(std::memory_order_seq_cst);
      }
      if (mode == 1) {
        copy<<<copyBlocks(), 256, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), count);
        signal<<<1, 1, 0, stream>>>(sharedOnDevice, id);
      }
      control.go.store(id, std::memory_order_release);
      if (mode == 2) {
        check(cudaMemcpyAsync(local, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
        signal<<<1, 1, 0, stream>>>(pinnedOnDevice, id);
        spinUntil(pinned, id);
        control.ended[mode][round] = nowNs();
        control.copied.store(id, std::memory_order_release);
      }
      while (control.seen.load(std::memory_order_acquire) != id) {}
      check(cudaStreamSynchronize(stream), "round");
    }
  }
  std::printf(
      "%.0f MiB on one GPU, %d rounds a mode, from the sender's start to the copy seen done, and to the "
      "receiver's next kernel seen done:\n",
      bytes / 1048576.0, kRounds);
  for (int mode = 0; mode < kModes; ++mode) {
    std::vector<double> copied;
    std::vector<double> resumed;
    std::vector<double> filled;
    for (int round = 1; round < kRounds; ++round) {  // the first round of each mode warms up
      copied.push_back((control.ended[mode][round] - control.started[mode][round]) / 1e6);
      resumed.push_back((control.resumed[mode][round] - control.started[mode][round]) / 1e6);
      filled.push_back(control.filled[mode][round] / 1e6);
    }
    std::sort(copied.begin(), copied.end());
    std::sort(resumed.begin(), resumed.end());
    std::sort(filled.begin(), filled.end());
    std::printf(
        "  %-7s copied median %.3f ms (min %.3f, max %.3f); receiver's next kernel median %.3f ms (min %.3f, "
        "max %.3f); the sender's weights kernel before it %.3f ms\n",
        kModeNames[mode], median(copied), copied.front(), copied.back(), median(resumed), resumed.front(),
        resumed.back(), median(filled));
  }
  control.quit.store(1);
  check(cudaIpcCloseMemHandle(dst), "cudaIpcCloseMemHandle");
  check(cudaHostUnregister(&shared), "cudaHostUnregister");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MIB\n", argv[0]);
    return 2;
  }
  const size_t bytes = size_t(std::atoll(argv[1])) << 20;
  void* mapped =
      mmap(nullptr, sizeof(Control) + sizeof(FlagPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* control = new (mapped) Control();
  auto* shared = new (static_cast<char*>(mapped) + sizeof(Control)) FlagPage{-1};
  const pid_t child = fork();
  if (child == 0) {
    receiver(*control, *shared, bytes);
    return 0;
  }
  sender(*control, *shared, bytes);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
