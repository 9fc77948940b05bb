// The ceiling of copies made by SMs against cudaMemcpyAsync on one GPU: the profile behind issue 18's cuda_ipc
// work (bench/results/issue18-cuda-ipc-profile-2026-11-25.md). It times wsync's copy kernel (copy_kernel.cu, with
// its checksum) on one run or on many small ones, plain grid-stride and block-chunked copies, and the copy engine;
// IPC=1 imports the source from a child process over CUDA IPC, as a cuda_ipc receiver reads it. Since 2026-11-28 it
// also times the copy engines on the runs (cudaMemcpyBatchAsync: one call for every run) and a Hopper bulk-copy
// kernel (cp.async.bulk global -> shared -> global, driven by one thread, the checksum folded from shared memory by
// the rest), and checks that the bulk kernel's sums equal wsync's kernel's; and what the host sees of one launch
// (from before the call until it sees the end) against the GPU's time, by each way of seeing the end. Not built by
// CMake:
//   nvcc -O3 -std=c++20 -arch=sm_90 -Ibus/src -Ibus/include -Ibuild/schemas/include \
//        -o copy_ceiling bench/profiles/copy_ceiling.cu
//   ./copy_ceiling BYTES [RUN_BYTES]   (RUN_BYTES 0: one run; runs lie end to end, so RUN_BYTES sets their
//                                       alignment: 42948 puts them 4 bytes apart from 16-byte boundaries)
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include "channel/gpu/copy_kernel.cu"
#include "channel/gpu/copy_reporter.cpp"
using namespace wsync::bus::gpu::detail;
using wsync::bus::DeviceChecksumSums;
#define CK(x)                                        \
  do {                                               \
    cudaError_t e = (x);                             \
    if (e != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                      \
    }                                                \
  } while (0)

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
// Varied source bytes, so that equal sums say more than equal sizes.
__global__ void fillPattern(uint32_t* words, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    words[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 13);
}
// Block-contiguous: each block owns a contiguous slice (like our chunks) instead of grid-strided vectors.
template <int U>
__global__ void __launch_bounds__(512)
    chunkCopy(const uint4* __restrict__ s, uint4* __restrict__ d, size_t n, size_t chunk) {
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

// ---- Hopper bulk copies (TMA without a tensor map): global -> shared -> global, the checksum read from shared. ----
__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ bool tryWait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
struct Piece {
  uint64_t src, dst, word;
  uint32_t bytes, key0, key1, pad;
};
// S stages of B bytes; the producer (thread 0) loads L = S - 2 pieces ahead; a stage is loaded again once its store
// finished reading it (wait_group.read 1) and every thread passed the barrier after its checksum.
template <int B, int S, bool SUM>
__global__ void __launch_bounds__(256)
    bulkCopy(const CopyRun* runs, const uint32_t* chunkRuns, uint32_t chunkCount, DeviceChecksumSums* sums) {
  extern __shared__ __align__(128) unsigned char dyn[];
  unsigned char* stage = dyn;  // S * B bytes
  __shared__ __align__(8) uint64_t bars[S];
  __shared__ Piece desc[S];
  constexpr int L = S - 2;
  // the producer's cursor
  uint32_t chunk = blockIdx.x;
  uint64_t offset = 0, begin = 0, end = 0;
  CopyRun run{};
  bool have = false;
  auto next = [&](Piece& p) -> bool {
    while (true) {
      if (!have) {
        if (chunk >= chunkCount) return false;
        run = runs[chunkRuns[chunk]];
        begin = uint64_t{chunk - run.firstChunk} * kCopyChunkBytes;
        end = begin + kCopyChunkBytes < run.bytes ? begin + kCopyChunkBytes : run.bytes;
        offset = begin;
        have = true;
      }
      if (offset < end) {
        uint64_t n = end - offset < B ? end - offset : B;
        p.src = run.src + offset;
        p.dst = run.dst + offset;
        p.word = run.firstWord + offset / 8;
        p.bytes = (uint32_t)n;
        p.key0 = (run.tensor * kMulT0) ^ kSeed0;
        p.key1 = (run.tensor * kMulT1) ^ kSeed1;
        offset += n;
        return true;
      }
      have = false;
      chunk += gridDim.x;
    }
  };
  auto produce = [&](uint32_t piece) {
    const int s = piece % S;
    Piece p{};
    const bool more = next(p);
    if (!more) p.bytes = 0;
    desc[s] = p;
    const uint32_t bar = smem(&bars[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(p.bytes) : "memory");
    if (p.bytes != 0) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem(stage + s * B)),
                   "l"(p.src), "r"(p.bytes), "r"(bar)
                   : "memory");
    }
    return more;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bars[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  bool producing = true;
  if (threadIdx.x == 0)
    for (uint32_t p = 0; p < L && producing; ++p) producing = produce(p);
  uint64_t sum0 = 0, sum1 = 0;
  for (uint32_t i = 0;; ++i) {
    if (threadIdx.x == 0 && producing) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      producing = produce(i + L);
    }
    const int s = i % S;
    while (!tryWait(smem(&bars[s]), (i / S) & 1)) {}
    const Piece p = desc[s];
    if (p.bytes == 0) break;
    if (threadIdx.x == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(p.dst), "r"(smem(stage + s * B)),
                   "r"(p.bytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    if (SUM) {
      const uint4* v = reinterpret_cast<const uint4*>(stage + s * B);
      for (uint32_t k = threadIdx.x; k < p.bytes / 16; k += blockDim.x) {
        const uint4 x = v[k];
        const uint64_t word = p.word + 2 * k;
        fold(sum0, sum1, p.key0, p.key1, word, (uint64_t{x.y} << 32) | x.x);
        fold(sum0, sum1, p.key0, p.key1, word + 1, (uint64_t{x.w} << 32) | x.z);
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (!SUM) return;
  for (int o = 16; o > 0; o /= 2) {
    sum0 += __shfl_down_sync(~0u, sum0, o);
    sum1 += __shfl_down_sync(~0u, sum1, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd((unsigned long long*)&sums->lane[0], (unsigned long long)sum0);
    atomicAdd((unsigned long long*)&sums->lane[1], (unsigned long long)sum1);
  }
}

// ---- Warp-specialized bulk copies (2026-11-29): warp 0 loads (one thread issues cp.async.bulk global -> shared,
// the next run's table entry fetched a chunk ahead), warp 1 stores (shared -> global, releasing a stage once its
// store has read it, LAG stores behind), C warps fold the checksum from shared memory. No __syncthreads per piece:
// full/empty mbarriers per stage. A run's last piece copies its bytes past the last multiple of 16 (cp.async.bulk
// moves multiples of 16) with plain loads, in the checksum warps. ----
struct Piece2 {
  uint64_t src, dst, word;
  uint32_t bulk, tail, key0, key1;
};
__device__ __forceinline__ void waitParity(uint32_t bar, uint32_t parity) {
  while (!tryWait(bar, parity)) {}
}
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
template <int B, int S, int C, int LAG>
__global__ void __launch_bounds__((2 + C) * 32)
    bulk2Copy(const CopyRun* runs, const uint32_t* chunkRuns, uint32_t chunkCount, DeviceChecksumSums* sums) {
  static_assert(LAG >= 1 && LAG < S);
  extern __shared__ __align__(128) unsigned char stage[];  // S * B bytes
  __shared__ __align__(8) uint64_t full[S];
  __shared__ __align__(8) uint64_t empty[S];
  __shared__ Piece2 desc[S];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&full[s])));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(&empty[s])), "r"(C + 1));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  uint64_t sum0 = 0, sum1 = 0;
  if (warp == 0) {
    if (lane == 0) {
      uint32_t chunk = blockIdx.x;
      const uint32_t g = gridDim.x;
      CopyRun run{};
      if (chunk < chunkCount) run = runs[chunkRuns[chunk]];
      uint32_t afterIndex = chunk + g < chunkCount ? chunkRuns[chunk + g] : 0;
      uint64_t offset = 0, end = 0;
      bool fresh = true;
      for (uint32_t i = 0;; ++i) {
        const int s = i % S;
        if (i >= S) waitParity(smem(&empty[s]), ((i / S) - 1) & 1);
        Piece2 p{};
        while (chunk < chunkCount) {
          if (fresh) {
            offset = uint64_t{chunk - run.firstChunk} * kCopyChunkBytes;
            end = offset + kCopyChunkBytes < run.bytes ? offset + kCopyChunkBytes : run.bytes;
            fresh = false;
          }
          if (offset < end) break;
          chunk += g;
          fresh = true;
          if (chunk < chunkCount) {
            run = runs[afterIndex];
            afterIndex = chunk + g < chunkCount ? chunkRuns[chunk + g] : 0;
          }
        }
        if (chunk < chunkCount) {
          const uint64_t n = end - offset < B ? end - offset : B;
          p.src = run.src + offset;
          p.dst = run.dst + offset;
          p.word = run.firstWord + offset / 8;
          const bool aligned = ((p.src | p.dst) & 15) == 0;
          p.bulk = aligned ? (uint32_t)(n & ~uint64_t{15}) : 0;
          p.tail = (uint32_t)n - p.bulk;
          p.key0 = (run.tensor * kMulT0) ^ kSeed0;
          p.key1 = (run.tensor * kMulT1) ^ kSeed1;
          offset += n;
        }
        desc[s] = p;
        const uint32_t bar = smem(&full[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(p.bulk) : "memory");
        if (p.bulk != 0) {
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                           smem(stage + s * B)),
                       "l"(p.src), "r"(p.bulk), "r"(bar)
                       : "memory");
        }
        if (p.bulk == 0 && p.tail == 0) break;
      }
    }
  } else if (warp == 1) {
    if (lane == 0) {
      for (uint32_t i = 0;; ++i) {
        const int s = i % S;
        waitParity(smem(&full[s]), (i / S) & 1);
        const Piece2 p = desc[s];
        if (p.bulk == 0 && p.tail == 0) break;
        if (p.bulk != 0) {
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(p.dst),
                       "r"(smem(stage + s * B)), "r"(p.bulk)
                       : "memory");
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        if (i >= LAG) {
          asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(LAG) : "memory");
          arrive(smem(&empty[(i - LAG) % S]));
        }
      }
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
  } else {
    const int t = threadIdx.x - 64;
    for (uint32_t i = 0;; ++i) {
      const int s = i % S;
      waitParity(smem(&full[s]), (i / S) & 1);
      const Piece2 p = desc[s];
      if (p.bulk == 0 && p.tail == 0) break;
      const uint4* v = reinterpret_cast<const uint4*>(stage + s * B);
      for (uint32_t k = t; k < p.bulk / 16; k += C * 32) {
        const uint4 x = v[k];
        const uint64_t word = p.word + 2 * k;
        fold(sum0, sum1, p.key0, p.key1, word, (uint64_t{x.y} << 32) | x.x);
        fold(sum0, sum1, p.key0, p.key1, word + 1, (uint64_t{x.w} << 32) | x.z);
      }
      for (uint32_t o = p.bulk + 8 * t; o < p.bulk + p.tail; o += 8 * C * 32) {
        const uint32_t n = p.bulk + p.tail - o < 8 ? p.bulk + p.tail - o : 8;
        const uint64_t value = loadWord(reinterpret_cast<const unsigned char*>(p.src) + o, n);
        storeOutside(reinterpret_cast<unsigned char*>(p.dst), o, value, n, 0, 0);
        fold(sum0, sum1, p.key0, p.key1, p.word + o / 8, value);
      }
      __syncwarp();
      if (lane == 0) arrive(smem(&empty[s]));
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    sum0 += __shfl_down_sync(~0u, sum0, o);
    sum1 += __shfl_down_sync(~0u, sum1, o);
  }
  if (warp >= 2 && lane == 0) {
    atomicAdd((unsigned long long*)&sums->lane[0], (unsigned long long)sum0);
    atomicAdd((unsigned long long*)&sums->lane[1], (unsigned long long)sum1);
  }
}

int main(int argc, char** argv) {
  size_t bytes = (argc > 1 ? atoll(argv[1]) : 4ull << 30);
  size_t tensor = (argc > 2 ? atoll(argv[2]) : 0);  // 0: one run
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // SCATTER=1: every run a cudaMalloc of its own on both sides, as the channel's one-allocation-per-tensor rows.
  const bool scatter = getenv("SCATTER") != nullptr && tensor != 0;
  int toChildEnd = -1;
  void *src, *dst;
  const bool ipc = getenv("IPC") != nullptr;
  if (ipc) {
    int toParent[2], toChild[2];
    pipe(toParent);
    pipe(toChild);
    if (fork() == 0) {  // the exporter: allocates the source, hands its handle over, waits for the parent
      void* mine;
      CK(cudaMalloc(&mine, bytes));
      fillPattern<<<1024, 256>>>((uint32_t*)mine, bytes / 4);
      CK(cudaDeviceSynchronize());
      cudaIpcMemHandle_t h;
      CK(cudaIpcGetMemHandle(&h, mine));
      write(toParent[1], &h, sizeof h);
      char c;
      read(toChild[0], &c, 1);
      _exit(0);
    }
    toChildEnd = toChild[1];
    cudaIpcMemHandle_t h;
    read(toParent[0], &h, sizeof h);
    CK(cudaIpcOpenMemHandle(&src, h, cudaIpcMemLazyEnablePeerAccess));
    printf("source imported over CUDA IPC from a child process\n");
  } else {
    CK(cudaMalloc(&src, bytes));
    fillPattern<<<1024, 256>>>((uint32_t*)src, bytes / 4);
  }
  // DST_SHIFT=N: the destination's runs N bytes further on than the source's (their offsets from 16 bytes differ).
  const size_t dstShift = getenv("DST_SHIFT") != nullptr ? atoll(getenv("DST_SHIFT")) : 0;
  CK(cudaMalloc(&dst, bytes + dstShift));
  CK(cudaMemset(dst, 0, bytes + dstShift));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  // our table
  std::vector<CopyRun> runs;
  std::vector<uint32_t> chunkRuns;
  uint32_t chunks = 0;
  size_t step = tensor ? tensor : bytes;
  std::vector<void*> scattered;
  // RUN_STRIDE=S: runs start S bytes apart (gaps between them are not copied), as torch's allocator places tensors:
  // 42948-byte runs at a stride of 43008 are 100,000 tensors as torch's allocator places them (512-byte blocks),
  // each ending 4 bytes past a 16-byte boundary. (In synthetic:100000:4096 the matrices are multiples of 256 bytes;
  // its 28,633 vectors, norms and biases, are any even size and have tails.)
  const size_t stride = getenv("RUN_STRIDE") != nullptr && tensor != 0 ? atoll(getenv("RUN_STRIDE")) : step;
  for (size_t off = 0, t = 0; off < bytes; off += stride, ++t) {
    size_t n = std::min(step, bytes - off);
    uint64_t from = (uint64_t)src + off, to = (uint64_t)dst + dstShift + off;
    if (scatter) {
      void *a, *b;
      CK(cudaMalloc(&a, n));
      CK(cudaMalloc(&b, n));
      CK(cudaMemcpy(a, (void*)from, n, cudaMemcpyDeviceToDevice));
      scattered.push_back(a);
      scattered.push_back(b);
      from = (uint64_t)a;
      to = (uint64_t)b;
    }
    runs.push_back(CopyRun{from, to, n, 0, (uint32_t)t, chunks, 0});
    uint32_t c = (n + kCopyChunkBytes - 1) / kCopyChunkBytes;
    chunkRuns.insert(chunkRuns.end(), c, (uint32_t)(runs.size() - 1));
    chunks += c;
  }
  CopyRun* dRuns;
  uint32_t* dChunks;
  DeviceChecksumSums* sums;
  CK(cudaMalloc(&dRuns, runs.size() * sizeof(CopyRun)));
  CK(cudaMalloc(&dChunks, chunkRuns.size() * 4));
  CK(cudaMalloc(&sums, sizeof(DeviceChecksumSums)));
  CK(cudaMemset(sums, 0, sizeof(DeviceChecksumSums)));  // the kernel adds to them: initcheck reads them as used
  CK(cudaMemcpy(dRuns, runs.data(), runs.size() * sizeof(CopyRun), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dChunks, chunkRuns.data(), chunkRuns.size() * 4, cudaMemcpyHostToDevice));
  size_t n = bytes / 16;
  if (scatter) printf("every run a cudaMalloc of its own on both sides (%zu allocations)\n", scattered.size());
  auto time = [&](const char* what, auto&& fn) -> int {
    float best = 1e9, sum = 0;
    for (int r = 0; r < 8; ++r) {
      CK(cudaEventRecord(a, st));
      fn();
      CK(cudaGetLastError());
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 2) {
        best = std::min(best, ms);
        sum += ms;
      }
    }
    printf("%-34s best %.3f ms mean %.3f ms  %.0f GB/s (copy)\n", what, best, sum / 6, bytes / best / 1e6);
    return 0;
  };
  time("cudaMemcpyAsync", [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st); });
  for (int bl : {2 * sms, 1024}) {
    char name[64];
    snprintf(name, 64, "wsync copyRuns %u runs %d blk", (unsigned)runs.size(), bl);
    time(name, [&] { launchCopyRuns(dRuns, dChunks, chunks, chunks, sums, {}, bl, st); });
  }
  // VERIFY: wsync's kernel moved every byte, and its sums are the host reference's (each run a tensor of its own).
  if (getenv("VERIFY") != nullptr) {
    std::vector<unsigned char> from(bytes), to(bytes);
    CK(cudaMemset(dst, 0, bytes));
    CK(cudaMemset(sums, 0, sizeof(DeviceChecksumSums)));
    CK(launchCopyRuns(dRuns, dChunks, chunks, chunks, sums, {}, 1024, st));
    CK(cudaStreamSynchronize(st));
    DeviceChecksumSums device{}, host{};
    CK(cudaMemcpy(&device, sums, sizeof device, cudaMemcpyDeviceToHost));
    std::size_t wrong = 0;
    for (std::size_t t = 0; t < runs.size(); ++t) {
      const CopyRun& r = runs[t];
      CK(cudaMemcpy(from.data(), (void*)r.src, r.bytes, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(to.data(), (void*)r.dst, r.bytes, cudaMemcpyDeviceToHost));
      if (memcmp(from.data(), to.data(), r.bytes) != 0) ++wrong;
      for (uint64_t o = 0, w = 0; o < r.bytes; o += 8, ++w) {
        uint64_t value = 0;
        memcpy(&value, from.data() + o, std::min<uint64_t>(8, r.bytes - o));
        wsync::bus::addDeviceChecksumWord(host, (uint32_t)t, w, value);
      }
    }
    const bool same = device.lane[0] == host.lane[0] && device.lane[1] == host.lane[1];
    const CopyRun& second = runs[runs.size() > 1 ? 1 : 0];
    printf("VERIFY runs %zu of %zu bytes, the second from +%llu to +%llu: %zu runs wrong, sums %s\n", runs.size(), step,
           (unsigned long long)(second.src & 15), (unsigned long long)(second.dst & 15), wrong,
           same ? "equal to the host's" : "DIFFER from the host's");
    if (wrong != 0 || !same) return 2;
  }
  // ONLY_WSYNC: the copy engine and wsync's kernel alone (runs at odd offsets: RUN_BYTES not a multiple of 16).
  if (getenv("ONLY_WSYNC") != nullptr) return 0;
  // What the host sees of one launch: from before the call until it sees the end, against the GPU's time between
  // events around the work, by each way of seeing the end. Medians of 10.
  if (getenv("ONLY_BULK2") == nullptr) {
    auto reporter = CopyReporter::create();
    if (!reporter) {
      printf("CopyReporter: %s\n", reporter.error().detail.c_str());
      return 1;
    }
    cudaEvent_t done;
    CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    auto view = [&](const char* what, auto&& enqueue, auto&& waitEnd) -> int {
      std::vector<double> host, gpu;
      for (int r = 0; r < 12; ++r) {
        CK(cudaStreamSynchronize(st));
        const auto t0 = std::chrono::steady_clock::now();
        CK(cudaEventRecord(a, st));
        enqueue();
        CK(cudaEventRecord(b, st));
        const auto t1 = std::chrono::steady_clock::now();
        waitEnd();
        const auto t2 = std::chrono::steady_clock::now();
        CK(cudaStreamSynchronize(st));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 2) {
          host.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
          gpu.push_back(ms);
          if (r == 11)
            printf("  (last: enqueue %.3f ms)\n", std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
      }
      std::sort(host.begin(), host.end());
      std::sort(gpu.begin(), gpu.end());
      printf("%-46s host %.3f ms, GPU %.3f ms, host - GPU %.3f ms\n", what, host[5], gpu[5], host[5] - gpu[5]);
      return 0;
    };
    view(
        "memcpy, cudaStreamSynchronize", [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st); },
        [&] { cudaStreamSynchronize(st); });
    view(
        "memcpy, event asked with yield",
        [&] {
          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st);
          cudaEventRecord(done, st);
        },
        [&] {
          while (cudaEventQuery(done) == cudaErrorNotReady) std::this_thread::yield();
        });
    view(
        "kernel+memset+copy back, event with yield",
        [&] {
          cudaMemsetAsync(sums, 0, sizeof(DeviceChecksumSums), st);
          launchCopyRuns(dRuns, dChunks, chunks, chunks, sums, {}, 1024, st);
          cudaMemcpyAsync(reporter->deviceSums(), sums, 16, cudaMemcpyDeviceToDevice, st);
          cudaEventRecord(done, st);
        },
        [&] {
          while (cudaEventQuery(done) == cudaErrorNotReady) std::this_thread::yield();
        });
    CopyReport report{};
    view(
        "kernel reporting, report read with yield",
        [&] {
          report = reporter->next();
          launchCopyRuns(dRuns, dChunks, chunks, chunks, reporter->deviceSums(), report, 1024, st);
        },
        [&] {
          while (!reporter->reported(report)) std::this_thread::yield();
        });
    view(
        "kernel reporting, report read, no yield",
        [&] {
          report = reporter->next();
          launchCopyRuns(dRuns, dChunks, chunks, chunks, reporter->deviceSums(), report, 1024, st);
        },
        [&] {
          while (!reporter->reported(report)) {}
        });
    view(
        "kernel, cudaStreamSynchronize", [&] { launchCopyRuns(dRuns, dChunks, chunks, chunks, sums, {}, 1024, st); },
        [&] { cudaStreamSynchronize(st); });
    view(
        "empty reporting kernel, report read",
        [&] {
          report = reporter->next();
          launchCopyRuns(dRuns, dChunks, 0, 0, reporter->deviceSums(), report, 1024, st);
        },
        [&] {
          while (!reporter->reported(report)) {}
        });
  }
  // The sums wsync's kernel folds, to check the bulk kernel's against.
  DeviceChecksumSums want{}, got{};
  CK(cudaMemset(sums, 0, sizeof want));
  launchCopyRuns(dRuns, dChunks, chunks, chunks, sums, {}, 1024, st);
  CK(cudaMemcpy(&want, sums, sizeof want, cudaMemcpyDeviceToHost));
  auto bulk = [&](const char* what, auto kernel, int stageBytes, int blocks, int threads = 256) -> int {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, stageBytes));
    CK(cudaMemset(sums, 0, sizeof got));
    CK(cudaMemset(dst, 0, bytes));
    kernel<<<blocks, threads, stageBytes, st>>>(dRuns, dChunks, chunks, sums);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(&got, sums, sizeof got, cudaMemcpyDeviceToHost));
    const bool sumsEqual = got.lane[0] == want.lane[0] && got.lane[1] == want.lane[1];
    std::vector<unsigned char> probe(4096), source(4096);
    const CopyRun& lastRun = runs.back();
    CK(cudaMemset((void*)lastRun.dst, 0, lastRun.bytes));
    kernel<<<blocks, threads, stageBytes, st>>>(dRuns, dChunks, chunks, sums);
    CK(cudaStreamSynchronize(st));
    const size_t tail = std::min<size_t>(4096, lastRun.bytes);
    probe.resize(tail);
    source.resize(tail);
    CK(cudaMemcpy(probe.data(), (unsigned char*)(lastRun.dst + lastRun.bytes - tail), tail, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(source.data(), (unsigned char*)(lastRun.src + lastRun.bytes - tail), tail, cudaMemcpyDeviceToHost));
    const bool copied = probe == source;
    printf("%-34s sums %s, last run's end %s\n", what, sumsEqual ? "equal" : "DIFFER",
           copied ? "copied" : "NOT COPIED");
    return time(what, [&] { kernel<<<blocks, threads, stageBytes, st>>>(dRuns, dChunks, chunks, sums); });
  };
  // ONLY_BULK2: the warp-specialized kernel alone (under compute-sanitizer). The first bulk kernel moves whole
  // runs with cp.async.bulk, which takes multiples of 16 bytes only.
  const bool onlyBulk2 = getenv("ONLY_BULK2") != nullptr;
  if (!onlyBulk2 && tensor % 16 == 0) {
    bulk("bulk 16K x6, 2/SM, checksum", bulkCopy<16384, 6, true>, 16384 * 6, 2 * sms);
    bulk("bulk 16K x6, 2/SM, no checksum", bulkCopy<16384, 6, false>, 16384 * 6, 2 * sms);
    bulk("bulk 8K x8, 3/SM, checksum", bulkCopy<8192, 8, true>, 8192 * 8, 3 * sms);
    bulk("bulk 8K x12, 2/SM, checksum", bulkCopy<8192, 12, true>, 8192 * 12, 2 * sms);
    bulk("bulk 4K x16, 2/SM, checksum", bulkCopy<4096, 16, true>, 4096 * 16, 2 * sms);
    bulk("bulk 8K x10, 2/SM, checksum", bulkCopy<8192, 10, true>, 8192 * 10, 2 * sms);
    bulk("bulk 8K x6, 4/SM, checksum", bulkCopy<8192, 6, true>, 8192 * 6, 4 * sms);
  }
  bulk("bulk2 8K x10 C4, 2/SM", bulk2Copy<8192, 10, 4, 2>, 8192 * 10, 2 * sms, 192);
  bulk("bulk2 8K x8 C4, 3/SM", bulk2Copy<8192, 8, 4, 2>, 8192 * 8, 3 * sms, 192);
  bulk("bulk2 16K x6 C4, 2/SM", bulk2Copy<16384, 6, 4, 2>, 16384 * 6, 2 * sms, 192);
  bulk("bulk2 8K x12 C6, 2/SM", bulk2Copy<8192, 12, 6, 3>, 8192 * 12, 2 * sms, 256);
  bulk("bulk2 4K x16 C4, 3/SM", bulk2Copy<4096, 16, 4, 4>, 4096 * 16, 3 * sms, 192);
  bulk("bulk2 16K x12 C6, 1/SM", bulk2Copy<16384, 12, 6, 4>, 16384 * 12, sms, 256);
  bulk("bulk2 32K x6 C6, 1/SM", bulk2Copy<32768, 6, 6, 2>, 32768 * 6, sms, 256);
  bulk("bulk2 8K x6 C2, 4/SM", bulk2Copy<8192, 6, 2, 2>, 8192 * 6, 4 * sms, 128);
  if (onlyBulk2) return 0;
  // The copy engines on every run: cudaMemcpyBatchAsync took 370-475 ms for 100,000 runs of 43 KB on an H200
  // (2026-11-28), host-bound, and one cudaMemcpyAsync per run as long: no longer timed here.
  time("plain grid-stride U4 2/SM", [&] { plainCopy<4><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n); });
  time("plain grid-stride U4 4/SM", [&] { plainCopy<4><<<4 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n); });
  time("plain grid-stride U8 2/SM", [&] { plainCopy<8><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n); });
  time("chunk 128K U4 1024 blk", [&] { chunkCopy<4><<<1024, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 8192); });
  time("chunk 128K U4 2/SM", [&] { chunkCopy<4><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 8192); });
  time("chunk 1M U4 2/SM", [&] { chunkCopy<4><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 65536); });
  time("chunk 1M U8 2/SM", [&] { chunkCopy<8><<<2 * sms, 512, 0, st>>>((uint4*)src, (uint4*)dst, n, 65536); });
  if (toChildEnd >= 0) {
    write(toChildEnd, "x", 1);
    wait(nullptr);
  }  // let the exporter go
  return 0;
}
