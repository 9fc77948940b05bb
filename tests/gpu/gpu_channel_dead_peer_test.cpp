// A peer of a GPU channel that dies or freezes costs its peers a failed transfer, never a hang. NCCL cannot see a
// dead peer by itself: the cancel probe (here: "has a peer process ended?", as an agent asks "did the coordinator
// abort?") must end the survivors' transfers well before the stall watchdog would, and a frozen peer, which no probe
// sees, must be caught by the watchdog. Each case runs with the fault in round 1 (for nccl: while the ranks still
// connect, which NCCL does lazily at the first broadcast) and in round 2 (a connected communicator).
//
// The peers run many rounds, so the fault always finds the others inside a transfer or about to start one. Every
// wait is bounded; the peers left over are SIGKILLed when a test ends.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <iostream>
#include <string>

#include "gpu_peers.hpp"
#include "wsync/bus/channel/nccl/nccl_channel.hpp"

namespace wsync::test {
namespace {

using Clock = std::chrono::steady_clock;

// More rounds than any fault test lets happen: the peers are always inside a transfer or between two.
constexpr std::uint64_t kManyRounds = 100'000;
// When the victim dies, counted from the start of its transfer in the fault round.
constexpr const char* kDieAfterMs = "5";
// Starting CUDA and NCCL in every process and reaching the fault round: seconds on an idle machine.
constexpr std::chrono::milliseconds kStartTimeout{60'000};
// Bound on a survivor noticing a dead peer through its cancel probe (polled every millisecond) and aborting.
constexpr std::chrono::milliseconds kDeadPeerNotice{10'000};
// The stall watchdog in the dead-peer cases: far above kDeadPeerNotice, so only the probe can end them in time.
constexpr std::chrono::milliseconds kSlowStall{60'000};
static_assert(kDeadPeerNotice * 2 <= std::chrono::milliseconds{bus::gpu::kNcclStallTimeout});
// The stall watchdog in the frozen-peer cases, and what it may take beyond it to abort and exit.
constexpr std::chrono::milliseconds kShortStall{3'000};
constexpr std::chrono::milliseconds kStallMargin{7'000};
// What ChildProcess::wait reports for a SIGKILLed process.
constexpr int kKilled = 128 + SIGKILL;

// What a peer whose transfer was ended by a dead peer may exit with: cancelled by its probe, or NCCL noticed first.
bool endedByDeadPeer(int status) { return status == gpu_peer::kAborted || status == gpu_peer::kCommunicatorFailed; }

class GpuChannelDeadPeer : public testing::TestWithParam<std::uint64_t> {
 protected:
  std::string faultRound() const { return std::to_string(GetParam()); }

  GroupOptions group(const std::string& channel, const std::string& endpoint, std::vector<int> receiverDevices) const {
    GroupOptions options;
    options.channel = channel;
    options.endpoint = endpoint;
    options.rounds = kManyRounds;
    options.receiverDevices = std::move(receiverDevices);
    options.everyPeerArgs = {"--fault-round", faultRound()};
    return options;
  }

  // Waits for `victim` to die by its own hand; then `survivor` must exit within kDeadPeerNotice, ended by the
  // dead peer.
  static void expectNoticed(GpuPeer& victim, GpuPeer& survivor) {
    ASSERT_EQ(victim.process.wait(kStartTimeout), kKilled) << victim.output();
    const auto died = Clock::now();
    const std::optional<int> status = survivor.process.wait(kDeadPeerNotice);
    ASSERT_TRUE(status.has_value()) << survivor.name << " still runs " << kDeadPeerNotice.count() << " ms after "
                                    << victim.name << " died\n"
                                    << survivor.output();
    EXPECT_PRED1(endedByDeadPeer, *status) << survivor.name << "\n" << survivor.output();
    std::cout << survivor.name << " gave up "
              << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - died).count() << " ms after "
              << victim.name << " died\n";
  }
};

TEST_P(GpuChannelDeadPeer, NcclKilledReceiverEndsTheSendersTransfer) {
  if (auto missing = missingNcclGpus(2)) GTEST_SKIP() << *missing;
  GroupOptions options = group("nccl", ncclUniqueIdHex(), {1});
  options.everyPeerArgs.insert(options.everyPeerArgs.end(), {"--stall-ms", std::to_string(kSlowStall.count())});
  options.receiverArgs[0] = {"--die-after-ms", kDieAfterMs};
  PeerGroup peers = startGroup(options);
  expectNoticed(peers.receivers[0], peers.sender);
}

TEST_P(GpuChannelDeadPeer, NcclKilledSenderEndsTheReceiversTransfer) {
  if (auto missing = missingNcclGpus(2)) GTEST_SKIP() << *missing;
  GroupOptions options = group("nccl", ncclUniqueIdHex(), {1});
  options.everyPeerArgs.insert(options.everyPeerArgs.end(), {"--stall-ms", std::to_string(kSlowStall.count())});
  options.senderArgs = {"--die-after-ms", kDieAfterMs};
  PeerGroup peers = startGroup(options);
  expectNoticed(peers.sender, peers.receivers[0]);
}

// A frozen receiver is alive to every probe: the sender's stall watchdog must end its transfer (Timeout).
TEST_P(GpuChannelDeadPeer, NcclFrozenReceiverStallsTheSenderIntoATimeout) {
  if (auto missing = missingNcclGpus(2)) GTEST_SKIP() << *missing;
  GroupOptions options = group("nccl", ncclUniqueIdHex(), {1});
  options.senderArgs = {"--stall-ms", std::to_string(kShortStall.count())};
  options.receiverArgs[0] = {"--stop-before-transfer"};
  PeerGroup peers = startGroup(options);
  GpuPeer& frozen = peers.receivers[0];
  ASSERT_TRUE(eventually([&] { return processState(frozen.process.pid()) == 'T'; }, kStartTimeout))
      << "the receiver never stopped itself\n"
      << frozen.output();
  const auto stopped = Clock::now();
  const std::optional<int> status = peers.sender.process.wait(kShortStall + kStallMargin);
  ASSERT_TRUE(status.has_value()) << "the sender still runs " << (kShortStall + kStallMargin).count()
                                  << " ms after the receiver froze\n"
                                  << peers.sender.output();
  EXPECT_EQ(*status, gpu_peer::kTimedOut) << peers.sender.output();
  std::cout << "the sender gave up "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stopped).count()
            << " ms after the receiver froze (stall watchdog " << kShortStall.count() << " ms)\n";
  frozen.process.signal(SIGKILL);
  EXPECT_EQ(frozen.process.wait(kStartTimeout), kKilled);
}

// Receiver 1 dies: the sender, waiting for every receiver, must give up; receiver 0, waiting for the next round
// from a sender that is gone, must give up too.
TEST_P(GpuChannelDeadPeer, CudaIpcKilledReceiverEndsTheTransfer) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  const auto segment = createIpcSegment();
  GroupOptions options = group("cuda_ipc", segment->name(), {0, 0});
  options.receiverArgs[1] = {"--die-after-ms", kDieAfterMs};
  PeerGroup peers = startGroup(options);
  expectNoticed(peers.receivers[1], peers.sender);
  if (HasFatalFailure()) return;
  // The sender names whom it was waiting for by the agent id the receiver wrote into its slot, or says that the
  // receiver had not reached the transfer yet (and so wrote no name for it: an earlier one may be another process's).
  const std::string said = peers.sender.output();
  EXPECT_TRUE(said.find("receiver '" + std::string(gpu_peer::kAgentIdPrefix)) != std::string::npos ||
              said.find("(not yet in this transfer)") != std::string::npos)
      << said;
  const std::optional<int> status = peers.receivers[0].process.wait(kDeadPeerNotice);
  ASSERT_TRUE(status.has_value()) << "receiver 0 still runs after the sender ended\n" << peers.receivers[0].output();
  EXPECT_PRED1(endedByDeadPeer, *status) << peers.receivers[0].output();
}

// The sender dies before it publishes the fault round: both receivers wait for it and must give up, not hang.
TEST_P(GpuChannelDeadPeer, CudaIpcSenderKilledBeforeReadyEndsTheReceivers) {
  if (auto missing = missingGpus(1)) GTEST_SKIP() << *missing;
  const auto segment = createIpcSegment();
  GroupOptions options = group("cuda_ipc", segment->name(), {0, 0});
  options.senderArgs = {"--die-after-ms", "0"};  // at once, before the transfer starts
  PeerGroup peers = startGroup(options);
  expectNoticed(peers.sender, peers.receivers[0]);
  if (HasFatalFailure()) return;
  const std::optional<int> status = peers.receivers[1].process.wait(kDeadPeerNotice);
  ASSERT_TRUE(status.has_value()) << "receiver 1 still runs after the sender died\n" << peers.receivers[1].output();
  EXPECT_PRED1(endedByDeadPeer, *status) << peers.receivers[1].output();
}

// The parameter is the fault round: ctest lists "FaultRound/GpuChannelDeadPeer.<case>/1" and ".../2".
INSTANTIATE_TEST_SUITE_P(FaultRound, GpuChannelDeadPeer, testing::Values(std::uint64_t{1}, std::uint64_t{2}));

}  // namespace
}  // namespace wsync::test
