// The nccl channel across processes and GPUs: the sender (rank 0) on GPU 0 and a receiver on each other GPU, each a
// gpu_peer process, or both on one GPU with NCCL taking them for two nodes (its network transport over the
// loopback: the layout of a multi-node run, and how a one-GPU machine tests the channel). Every byte of a model of
// every dtype and of odd sizes arrives in every round: through many small buckets (tensors spanning buckets;
// buckets that hold one piece and go straight between the tensors, others packed and unpacked), through one bucket
// holding everything, from and into tensors at odd addresses, and with the transfer's ends cut into ramps of
// smaller broadcasts (broadcast_slices.hpp) across both kinds of bucket. Every side's digest equals the host
// reference, computed here as well as in each peer.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>

#include "gpu_peers.hpp"
#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/nccl/broadcast_slices.hpp"
#include "wsync/bus/channel/nccl/nccl_channel.hpp"

namespace wsync::test {
namespace {

// A whole run: CUDA and NCCL starting in every process, the ranks connecting, three rounds of 3.5 MB. Seconds on an
// idle machine; the bound only keeps a hang from blocking the suite.
constexpr std::chrono::milliseconds kRunTimeout{90'000};
constexpr std::uint64_t kRounds = 3;

// Where the ranks run: a GPU each (NVLink or PCIe peers), or all on GPU 0 as nodes of their own to NCCL.
enum class Placement { OwnGpus, OneGpuOverSockets };

std::string placementName(const testing::TestParamInfo<Placement>& info) {
  return info.param == Placement::OwnGpus ? "OwnGpus" : "OneGpuOverSockets";
}

// The NCCL environment of the one-GPU placement, for this process (the bootstrap root of the unique id) and the
// peers it starts; restored when the test ends.
class SocketsOnly {
 public:
  SocketsOnly() {
    for (const auto& [name, value] : kVariables) ::setenv(name, value, 1);
  }
  ~SocketsOnly() {
    for (const auto& [name, value] : kVariables) ::unsetenv(name);
  }
  SocketsOnly(const SocketsOnly&) = delete;
  SocketsOnly& operator=(const SocketsOnly&) = delete;

 private:
  static constexpr std::pair<const char*, const char*> kVariables[] = {
      {"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}, {"NCCL_SOCKET_IFNAME", "lo"}};
};

class NcclChannelTransfer : public testing::TestWithParam<Placement> {
 protected:
  // Why this machine cannot run the test with `receivers` receivers, if it cannot.
  std::optional<std::string> missing(int receivers) const {
    if (GetParam() == Placement::OwnGpus) return missingNcclGpus(receivers + 1);
    if (auto why = missingGpus(1)) return why;
    if (auto version = bus::gpu::ncclVersion(); !version) return "NCCL cannot be loaded: " + version.error().describe();
    return std::nullopt;
  }

  GroupOptions ncclGroup(int receivers, std::uint64_t bucketBytes) {
    const bool shared = GetParam() == Placement::OneGpuOverSockets;
    if (shared && !sockets_) sockets_.emplace();
    GroupOptions options;
    options.channel = "nccl";
    options.endpoint = ncclUniqueIdHex();
    options.bucketBytes = bucketBytes;
    options.rounds = kRounds;
    options.senderDevice = 0;
    if (shared) options.senderArgs = {"--nccl-host-id", "wsync-test-sender"};
    for (int receiver = 0; receiver < receivers; ++receiver) {
      options.receiverDevices.push_back(shared ? 0 : receiver + 1);
      if (shared) {
        options.receiverArgs[static_cast<std::uint32_t>(receiver)] = {
            "--nccl-host-id", "wsync-test-receiver-" + std::to_string(receiver)};
      }
    }
    return options;
  }

 private:
  std::optional<SocketsOnly> sockets_;
};

bus::BucketPlan mixedPlan(std::uint64_t bucketBytes) {
  auto manifest = bus::Manifest::create(gpu_peer::mixedDtypeTensors());
  return *bus::BucketPlan::build(*manifest, bucketBytes, gpu_peer::kPlanAlignment);
}

TEST_P(NcclChannelTransfer, EveryByteThroughSmallBuckets) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  // The layout must hold both routes of the channel: buckets filled by a single piece (broadcast straight between
  // the tensors) and buckets of several pieces (packed, broadcast, unpacked).
  const bus::BucketPlan plan = mixedPlan(kSmallBucketBytes);
  std::uint32_t direct = 0;
  std::uint32_t packed = 0;
  for (std::uint32_t bucket = 0; bucket < plan.bucketCount(); ++bucket) {
    const auto pieces = plan.piecesOfBucket(bucket);
    direct += pieces.size() == 1 && pieces[0].bytes == kSmallBucketBytes ? 1U : 0U;
    packed += pieces.size() > 1 ? 1U : 0U;
  }
  ASSERT_GT(direct, 10U);
  ASSERT_GT(packed, 1U);

  const GroupOptions options = ncclGroup(1, kSmallBucketBytes);
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

TEST_P(NcclChannelTransfer, EveryByteThroughOneLargeBucket) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  ASSERT_EQ(mixedPlan(kLargeBucketBytes).bucketCount(), 1U);

  const GroupOptions options = ncclGroup(1, kLargeBucketBytes);
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

// Every tensor of both sides at an odd offset in one allocation (+1, +8, +24 bytes past a 32-byte boundary): the
// pack and unpack kernels and the direct broadcasts meet pointers that are not 16-byte aligned.
TEST_P(NcclChannelTransfer, EveryByteFromAndIntoUnalignedTensors) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  GroupOptions options = ncclGroup(1, kSmallBucketBytes);
  options.everyPeerArgs = {"--packed"};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

// One sender and a receiver on every other GPU of the machine, or three receivers sharing GPU 0 with it.
TEST_P(NcclChannelTransfer, EveryOtherRankReceives) {
  const int receivers = GetParam() == Placement::OwnGpus ? visibleGpus() - 1 : 3;
  if (auto why = missing(std::max(receivers, 2)))
    GTEST_SKIP() << *why << " (one receiver is covered by the tests above)";
  const GroupOptions options = ncclGroup(receivers, kSmallBucketBytes);
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

// The transfer's ends cut into broadcasts growing from 4 KiB (64 KiB buckets: packed and direct ones both cut) and
// from 64 KiB (everything in one bucket): pieces split between slices, each side's copies and broadcasts of a
// bucket in several launches, and no byte lost or moved twice.
TEST_P(NcclChannelTransfer, EveryByteThroughRampedSlices) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  for (const auto& [bucketBytes, firstSlice] :
       {std::pair{kSmallBucketBytes, bus::kSliceAlignment}, std::pair{kLargeBucketBytes, 16 * bus::kSliceAlignment}}) {
    SCOPED_TRACE("buckets of " + std::to_string(bucketBytes) + " bytes, first slice " + std::to_string(firstSlice));
    const bus::BucketPlan plan = mixedPlan(bucketBytes);
    const auto slices = bus::broadcastSlices(plan, firstSlice);
    ASSERT_GT(slices.size(), plan.bucketCount() + 4) << "the ramps cut nothing";
    GroupOptions options = ncclGroup(1, bucketBytes);
    options.everyPeerArgs = {"--first-slice-bytes", std::to_string(firstSlice)};
    PeerGroup group = startGroup(options);
    expectEveryRoundRight(group, options, kRunTimeout);
  }
}

// Buckets of 64 KiB + 256 bytes, off the slices' 4 KiB alignment (a plan also ends a bucket early where the next
// tensor's aligned start falls on its end): consecutive packed buckets lie 4 KiB apart in a staging buffer with
// padding between them, and slices of 4 to 16 KiB run on over those boundaries (protocol 6).
TEST_P(NcclChannelTransfer, EveryByteThroughSlicesAcrossPaddedBuckets) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  constexpr std::uint64_t kBucketBytes = kSmallBucketBytes + gpu_peer::kPlanAlignment;
  constexpr std::uint64_t kMaxSlice = 4 * bus::kSliceAlignment;
  const bus::BucketPlan plan = mixedPlan(kBucketBytes);
  bool spans = false;
  for (const bus::BroadcastSlice& slice : bus::broadcastSlices(plan, bus::kSliceAlignment, kMaxSlice)) {
    spans |= !slice.direct && slice.offset + slice.bytes > plan.bucketUsedBytes(slice.bucket);
  }
  ASSERT_TRUE(spans) << "no slice runs over a bucket's end";
  GroupOptions options = ncclGroup(1, kBucketBytes);
  options.everyPeerArgs = {"--first-slice-bytes", std::to_string(bus::kSliceAlignment), "--max-slice-bytes",
                           std::to_string(kMaxSlice)};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

// Staging buffers far smaller than the bucket: one 16 MiB bucket through two buffers of 16 KiB (with the ramp and
// without it), so the buffers go round hundreds of times in a transfer and pieces are cut at every slice; and the
// channel holds two such buffers, not two buckets. The default (half a bucket) is covered by every other test.
TEST_P(NcclChannelTransfer, EveryByteThroughStagingSmallerThanBuckets) {
  if (auto why = missing(1)) GTEST_SKIP() << *why;
  constexpr std::uint64_t kMaxSlice = 4 * bus::kSliceAlignment;
  for (const std::uint64_t firstSlice : {std::uint64_t{0}, bus::kSliceAlignment}) {
    SCOPED_TRACE("first slice " + std::to_string(firstSlice));
    const bus::BucketPlan plan = mixedPlan(kLargeBucketBytes);
    ASSERT_GT(bus::broadcastSlices(plan, firstSlice, kMaxSlice).size(), 100U) << "the buffers do not go round";
    GroupOptions options = ncclGroup(1, kLargeBucketBytes);
    options.everyPeerArgs = {"--first-slice-bytes", std::to_string(firstSlice), "--max-slice-bytes",
                             std::to_string(kMaxSlice)};
    PeerGroup group = startGroup(options);
    expectEveryRoundRight(group, options, kRunTimeout);
    if (HasFailure()) return;
    for (GpuPeer* peer : group.all()) {
      for (const RoundReport& round : peer->rounds()) {
        EXPECT_EQ(round.number("channel_buffer_bytes"), bus::gpu::kNcclDefaultBuffers * kMaxSlice) << peer->name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, NcclChannelTransfer,
                         testing::Values(Placement::OwnGpus, Placement::OneGpuOverSockets), placementName);

}  // namespace
}  // namespace wsync::test
