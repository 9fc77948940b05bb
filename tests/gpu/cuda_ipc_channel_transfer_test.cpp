// The cuda_ipc channel across processes: this test process owns the segment (as the coordinator does), a sender and
// two receivers run as gpu_peer processes, on one GPU or across two. Every byte of every round arrives and every
// side's digest equals the host reference; the sender exports its allocations once and the receivers keep their
// handles over the rounds after (generation 1 throughout) unless the sender's tensors move, when the export is
// renewed (generation 2) and the bytes are still right, also when the sender vouches for its allocations (no
// per-allocation check); tensors at odd addresses work too.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "gpu_peers.hpp"

namespace wsync::test {
namespace {

// A whole run: CUDA starting in three processes and four rounds of 3.5 MB. Seconds on an idle machine; the bound
// only keeps a hang from blocking the suite.
constexpr std::chrono::milliseconds kRunTimeout{90'000};
constexpr std::uint64_t kRounds = 4;
// exportGeneration() after the sender's first export, and after one more.
constexpr std::uint64_t kFirstExport = 1;
constexpr std::uint64_t kSecondExport = 2;

GroupOptions ipcGroup(const std::string& segment, std::vector<int> receiverDevices) {
  GroupOptions options;
  options.channel = "cuda_ipc";
  options.endpoint = segment;
  options.rounds = kRounds;
  options.senderDevice = 0;
  options.receiverDevices = std::move(receiverDevices);
  return options;
}

// Tensors with bytes: each is a cudaMalloc of its own in the sender unless packed, so a receiver opens this many.
std::uint32_t allocatedTensors() {
  std::uint32_t count = 0;
  for (const bus::TensorSpec& spec : gpu_peer::mixedDtypeTensors()) {
    bool empty = false;
    for (const std::int64_t dim : spec.shape) empty = empty || dim == 0;
    count += empty ? 0 : 1;
  }
  return count;
}

// The sender reports the first export in rounds before `movedAt` (1-based) and the second from then on. A receiver
// reports the segment's generation just after its transfer, when the sender may already have exported the next
// round's tensors: it lies between the sender's of its round and of the round after. Every receiver holds `handles`
// open throughout: what it opened for the first export it kept, and what the second no longer names it closed.
void expectExports(PeerGroup& group, std::uint64_t movedAt, std::uint32_t handles) {
  const std::vector<RoundReport> sent = group.sender.rounds();
  for (const RoundReport& report : sent) {
    EXPECT_EQ(report.number("generation"), report.round < movedAt ? kFirstExport : kSecondExport)
        << "sender: " << report.line;
  }
  for (GpuPeer& receiver : group.receivers) {
    for (const RoundReport& report : receiver.rounds()) {
      ASSERT_LE(report.round, sent.size());
      const std::uint64_t lowest = sent[report.round - 1].number("generation");
      const std::uint64_t highest = report.round < sent.size() ? sent[report.round].number("generation") : lowest;
      EXPECT_GE(report.number("generation"), lowest) << receiver.name << ": " << report.line;
      EXPECT_LE(report.number("generation"), highest) << receiver.name << ": " << report.line;
      EXPECT_EQ(report.number("handles"), handles) << receiver.name << ": " << report.line;
    }
  }
}

TEST(CudaIpcChannelTransfer, TwoReceiversOnTheSendersGpu) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  const auto segment = createIpcSegment();
  const GroupOptions options = ipcGroup(segment->name(), {0, 0});
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (HasFailure()) return;
  expectExports(group, kRounds + 1, allocatedTensors());
}

// Receiver 0 on GPU 1 reads the sender's memory on GPU 0 (peer access), receiver 1 on GPU 0; both must agree.
TEST(CudaIpcChannelTransfer, ReceiversOnTwoGpus) {
  if (auto missing = missingGpus(2)) GTEST_SKIP() << *missing;
  const auto segment = createIpcSegment();
  const GroupOptions options = ipcGroup(segment->name(), {1, 0});
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (HasFailure()) return;
  expectExports(group, kRounds + 1, allocatedTensors());
}

// Every tensor of every side at an odd offset in one allocation (+1, +8, +24 bytes past a 32-byte boundary): the
// sender exports one allocation, the copy kernel meets pointers that are not 16-byte aligned.
TEST(CudaIpcChannelTransfer, UnalignedTensorsInOneAllocation) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  const auto segment = createIpcSegment();
  GroupOptions options = ipcGroup(segment->name(), {0, 0});
  options.everyPeerArgs = {"--packed"};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (HasFailure()) return;
  expectExports(group, kRounds + 1, 1);
}

// The receivers' tensors packed at odd offsets, the sender's each in a cudaMalloc of its own (256-byte aligned): the
// copy kernel reads aligned and writes unaligned, every path of it keyed by the destination's alignment alone.
TEST(CudaIpcChannelTransfer, AlignedSenderIntoUnalignedReceivers) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  const auto segment = createIpcSegment();
  GroupOptions options = ipcGroup(segment->name(), {0, 0});
  options.receiverArgs = {{0, {"--packed"}}, {1, {"--packed"}}};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (HasFailure()) return;
  expectExports(group, kRounds + 1, allocatedTensors());
}

// In round 3 the sender's tensors move to new allocations (made before the old ones are freed, so every address
// changes): the sender exports again, the receivers open the new handles, and the bytes are those of round 3.
void expectMovedTensorsExportedAgain(std::vector<std::string> senderArgs) {
  constexpr std::uint64_t kMoveAt = 3;
  const auto segment = createIpcSegment();
  GroupOptions options = ipcGroup(segment->name(), {0, 0});
  options.senderArgs = {"--reallocate-at-round", std::to_string(kMoveAt)};
  options.senderArgs.insert(options.senderArgs.end(), senderArgs.begin(), senderArgs.end());
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (testing::Test::HasFailure()) return;
  EXPECT_EQ(group.sender.rounds()[kMoveAt - 1].number("moved"), 1U);
  expectExports(group, kMoveAt, allocatedTensors());
}

TEST(CudaIpcChannelTransfer, SenderTensorsMoveBetweenRounds) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  expectMovedTensorsExportedAgain({});
}

// The same with the sender vouching every round that its allocations were kept (true: every address changes, none
// is reused): cuda_ipc skips its per-allocation check, yet the moved tensors are exported again.
TEST(CudaIpcChannelTransfer, SenderTensorsMoveWhileItVouchesForItsAllocations) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  expectMovedTensorsExportedAgain({"--allocations-kept"});
}

// In round 3 the sender frees its tensors and allocates them again; cudaMalloc usually hands back the same
// addresses, now backed by new allocations. Receivers that kept the old handles would read the old memory (the
// bytes of round 2, or garbage): every byte must still be round 3's, whatever the addresses.
TEST(CudaIpcChannelTransfer, SenderMemoryAllocatedAgainAtTheSameAddresses) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  constexpr std::uint64_t kMoveAt = 3;
  const auto segment = createIpcSegment();
  GroupOptions options = ipcGroup(segment->name(), {0, 0});
  options.senderArgs = {"--reallocate-at-round", std::to_string(kMoveAt), "--reuse-addresses"};
  PeerGroup group = startGroup(options);
  expectEveryRoundRight(group, options, kRunTimeout);
  if (HasFailure()) return;
  const bool moved = group.sender.rounds()[kMoveAt - 1].number("moved") != 0;
  std::cout << "the reallocated tensors " << (moved ? "moved to other addresses" : "kept their addresses")
            << " (the case this test is about is the second)\n";
  RecordProperty("addresses_reused", moved ? "no" : "yes");
}

}  // namespace
}  // namespace wsync::test
