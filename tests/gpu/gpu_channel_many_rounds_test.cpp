// Many rounds in a row through one GPU channel, as a training run does: every round right, and nothing grows: the
// GPU memory free after round 3 (the channels allocate their buffers, tables and NCCL its connections in the first
// rounds) is still free after round 30, in every process, and so is the host memory each process holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>

#include "gpu_peers.hpp"

namespace wsync::test {
namespace {

constexpr std::uint64_t kRounds = 30;
// The round after which everything a channel keeps must have been allocated.
constexpr std::uint64_t kSettledRound = 3;
// cudaMemGetInfo counts the whole GPU, the other peers' allocations and the driver's included: a leak of one bucket
// buffer or one piece table per round (64 KiB and more, times 27 rounds) is far above this; noise is below it.
constexpr std::uint64_t kGpuGrowthTolerance = 2ULL * 1024 * 1024;
// Host memory: malloc arenas and stdio settle within a few pages; a leaked copy of the 3.5 MB model per round would
// be 90 MB. Under AddressSanitizer freed blocks wait in its quarantine (256 MiB) instead of being reused, so resident
// memory grows without a leak (5-7 MB over these rounds, on an H200): there LeakSanitizer finds leaks at each peer's
// exit instead, and this bound only catches growth past the quarantine.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t kRssGrowthToleranceKib = 256 * 1024;
#else
constexpr std::uint64_t kRssGrowthToleranceKib = 4 * 1024;
#endif
// Thirty rounds of 3.5 MB after CUDA (and NCCL) started in every process: seconds on an idle machine.
constexpr std::chrono::milliseconds kRunTimeout{120'000};

void expectNoGrowth(PeerGroup& group) {
  for (GpuPeer* peer : group.all()) {
    const std::vector<RoundReport> rounds = peer->rounds();
    ASSERT_EQ(rounds.size(), kRounds) << peer->output();
    const RoundReport& settled = rounds[kSettledRound - 1];
    const RoundReport& last = rounds.back();
    // Free memory going down is growth; going up (another process freeing) is not this process's concern.
    const std::uint64_t freeBefore = settled.number("gpu_free_after");
    const std::uint64_t freeAfter = last.number("gpu_free_after");
    EXPECT_LE(freeBefore - std::min(freeBefore, freeAfter), kGpuGrowthTolerance)
        << peer->name << ": GPU memory free after round " << kSettledRound << " " << freeBefore << ", after round "
        << kRounds << " " << freeAfter;
    const std::uint64_t rssBefore = settled.number("rss_kib");
    const std::uint64_t rssAfter = last.number("rss_kib");
    EXPECT_LE(rssAfter - std::min(rssBefore, rssAfter), kRssGrowthToleranceKib)
        << peer->name << ": resident KiB after round " << kSettledRound << " " << rssBefore << ", after round "
        << kRounds << " " << rssAfter;
    std::cout << peer->name << ": GPU free " << freeBefore << " -> " << freeAfter << " bytes, resident " << rssBefore
              << " -> " << rssAfter << " KiB (rounds " << kSettledRound << " -> " << kRounds << ")\n";
    // What the channel says it holds does not change at all once settled.
    EXPECT_EQ(last.number("channel_buffer_bytes"), settled.number("channel_buffer_bytes")) << peer->name;
    EXPECT_EQ(last.number("channel_table_bytes"), settled.number("channel_table_bytes")) << peer->name;
  }
}

TEST(GpuChannelManyRounds, NcclHoldsItsMemory) {
  if (auto missing = missingNcclGpus(2)) GTEST_SKIP() << *missing;
  GroupOptions options;
  options.channel = "nccl";
  options.endpoint = ncclUniqueIdHex();
  options.rounds = kRounds;
  options.receiverDevices = {1};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (HasFailure()) return;
  expectNoGrowth(group);
}

TEST(GpuChannelManyRounds, CudaIpcHoldsItsMemory) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  const auto segment = createIpcSegment();
  GroupOptions options;
  options.channel = "cuda_ipc";
  options.endpoint = segment->name();
  options.rounds = kRounds;
  options.receiverDevices = {0, 0};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (HasFailure()) return;
  expectNoGrowth(group);
}

}  // namespace
}  // namespace wsync::test
