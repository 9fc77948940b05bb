// The nccl channel across processes and GPUs: the sender (rank 0) on GPU 0 and a receiver on each other GPU, each a
// gpu_peer process. Every byte of a model of every dtype and of odd sizes arrives in every round: through many
// small buckets (tensors spanning buckets; buckets that hold one piece and go straight between the tensors, others
// packed and unpacked), through one bucket holding everything, and from and into tensors at odd addresses. Every
// side's digest equals the host reference, computed here as well as in each peer.
#include <gtest/gtest.h>

#include <chrono>

#include "gpu_peers.hpp"
#include "wsync/bus/channel/bucket_plan.hpp"

namespace wsync::test {
namespace {

// A whole run: CUDA and NCCL starting in every process, the ranks connecting, three rounds of 3.5 MB. Seconds on an
// idle machine; the bound only keeps a hang from blocking the suite.
constexpr std::chrono::milliseconds kRunTimeout{90'000};
constexpr std::uint64_t kRounds = 3;

GroupOptions ncclGroup(int receivers, std::uint64_t bucketBytes) {
  GroupOptions options;
  options.channel = "nccl";
  options.endpoint = ncclUniqueIdHex();
  options.bucketBytes = bucketBytes;
  options.rounds = kRounds;
  options.senderDevice = 0;
  for (int receiver = 0; receiver < receivers; ++receiver) options.receiverDevices.push_back(receiver + 1);
  return options;
}

bus::BucketPlan mixedPlan(std::uint64_t bucketBytes) {
  auto manifest = bus::Manifest::create(gpu_peer::mixedDtypeTensors());
  return *bus::BucketPlan::build(*manifest, bucketBytes, gpu_peer::kPlanAlignment);
}

TEST(NcclChannelTransfer, EveryByteThroughSmallBuckets) {
  if (auto missing = missingNcclGpus(2)) GTEST_SKIP() << *missing;
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

TEST(NcclChannelTransfer, EveryByteThroughOneLargeBucket) {
  if (auto missing = missingNcclGpus(2)) GTEST_SKIP() << *missing;
  ASSERT_EQ(mixedPlan(kLargeBucketBytes).bucketCount(), 1U);

  const GroupOptions options = ncclGroup(1, kLargeBucketBytes);
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

// Every tensor of both sides at an odd offset in one allocation (+1, +8, +24 bytes past a 32-byte boundary): the
// pack and unpack kernels and the direct broadcasts meet pointers that are not 16-byte aligned.
TEST(NcclChannelTransfer, EveryByteFromAndIntoUnalignedTensors) {
  if (auto missing = missingNcclGpus(2)) GTEST_SKIP() << *missing;
  GroupOptions options = ncclGroup(1, kSmallBucketBytes);
  options.everyPeerArgs = {"--packed"};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

// One sender and a receiver on every other GPU of the machine.
TEST(NcclChannelTransfer, EveryOtherGpuReceives) {
  if (auto missing = missingNcclGpus(3)) GTEST_SKIP() << *missing << " (2 GPUs are covered by the tests above)";
  const GroupOptions options = ncclGroup(visibleGpus() - 1, kSmallBucketBytes);
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
}

}  // namespace
}  // namespace wsync::test
