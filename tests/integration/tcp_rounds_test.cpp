// Rounds over the tcp payload channel with the real binaries on a tcp bus (docs/tcp-channel.md): versions reach
// every worker byte for byte, also while a crowd of strangers keeps knocking on the trainer's port (refused between
// rounds, dropped within the hello deadline during them); the trainer's listener is bound to its bus address and
// refuses connections between rounds while it keeps its port; a worker or the trainer killed mid-transfer costs one
// round (blamed on the one that died, or on the trainer's channel naming the lost worker by its agent id) and the
// next commits, and a corrupted receive is caught by the digests as on the shm channel.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>

#include "free_port.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "weight_dumps.hpp"
#include "wsync/bus/channel/tcp/tcp_channel.hpp"

namespace wsync::test {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A stranger's connection accepted by the trainer must close within this of its connect: the hello deadline plus the
// slack of a loaded machine. Far above the deadline, far below what a stranger held without one would reach.
constexpr auto kDropBound = bus::kTcpHelloDeadline + 2s;

// Where the trainer's log says its payload listener is bound ("tcp payload listener bound to HOST:PORT, ..."),
// waiting for the line; empty host if it never came.
struct BoundAddress {
  std::string host;
  std::uint16_t port = 0;
};

BoundAddress listenerAddress(const std::string& logPath) {
  constexpr std::string_view kLine = "tcp payload listener bound to ";
  const auto until = Clock::now() + kPatience;
  while (Clock::now() < until) {
    const std::string log = readTextFile(logPath);
    if (const auto at = log.find(kLine); at != std::string::npos) {
      const auto start = at + kLine.size();
      const auto comma = log.find(',', start);
      const std::string contact = log.substr(start, comma - start);
      const auto colon = contact.rfind(':');
      if (colon != std::string::npos) {
        return {contact.substr(0, colon), static_cast<std::uint16_t>(std::stoul(contact.substr(colon + 1)))};
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  return {};
}

// A connect to 127.0.0.1:`port`: the descriptor, or -1 and errno's value.
std::pair<int, int> connectTo(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    ::close(fd);
    return {-1, error};
  }
  return {fd, 0};
}

// Strangers knocking on the trainer's port from a thread of their own, as many at once as it has slots: each slot
// connects again as soon as it is refused or its connection closed. Counts the refusals and the connections the
// trainer accepted, and those it did not close within kDropBound.
class Crowd {
 public:
  Crowd(std::uint16_t port, std::size_t slots) : port_(port), slots_(slots) {
    thread_ = std::thread([this] { run(); });
  }
  ~Crowd() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t refused() const { return refused_; }
  std::uint64_t accepted() const { return accepted_; }
  std::uint64_t late() const { return late_; }

 private:
  struct Slot {
    int fd = -1;
    Clock::time_point connectedAt{};
  };

  void run() {
    std::vector<pollfd> fds;
    while (!stop_.load()) {
      fds.clear();
      for (Slot& slot : slots_) {
        if (slot.fd < 0) {
          const auto [fd, error] = connectTo(port_);
          if (fd >= 0) {
            slot = Slot{fd, Clock::now()};
            ++accepted_;
          } else if (error == ECONNREFUSED) {
            ++refused_;
          }
        }
        if (slot.fd >= 0) fds.push_back(pollfd{slot.fd, POLLIN, 0});
      }
      (void)::poll(fds.data(), fds.size(), 1);
      for (Slot& slot : slots_) {
        if (slot.fd < 0) continue;
        const auto held = Clock::now() - slot.connectedAt;
        char byte = 0;
        const ssize_t got = ::recv(slot.fd, &byte, 1, MSG_DONTWAIT);
        const bool closed = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        if (closed || held > kDropBound) {
          if (held > kDropBound) ++late_;
          ::close(slot.fd);
          slot.fd = -1;
        }
      }
    }
    for (Slot& slot : slots_) {
      if (slot.fd >= 0) ::close(slot.fd);
    }
  }

  const std::uint16_t port_;
  std::vector<Slot> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> late_{0};
  std::thread thread_;
};

class TcpRounds : public RoundFixture {
 protected:
  void SetUp() override {
    RoundFixture::SetUp();
    const int port = freePortPair();
    ASSERT_GT(port, 0);
    transport_ = "tcp://127.0.0.1:" + std::to_string(port);
    startCoordinator({"--transport", transport_, "--insecure"});
  }

  // An agent on the tcp bus with the tcp channel, plus `extra`.
  std::vector<std::string> agentArgs(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args{"--transport", transport_, "--channel", "tcp", "--model", kModel};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // Several buckets of the fixture's 1 MiB: a killed receiver goes while bytes still move.
  static constexpr const char* kModel = "synthetic:24:6";
};

TEST_F(TcpRounds, VersionsReachEveryWorkerByteForByte) {
  auto first = startWorker("w0", agentArgs({"--dump", path("w0.safetensors")}));
  auto second = startWorker("w1", agentArgs({"--dump", path("w1.safetensors")}));
  waitForAgents(2);
  auto trainer =
      startTrainer("t0", agentArgs({"--steps", "3", "--dump", path("trainer.safetensors")}), path("trainer.log"));
  for (std::uint64_t version = 1; version <= 3; ++version) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    EXPECT_EQ(outcome.version, version);
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 3));
  EXPECT_TRUE(waitForApplied("w1", 3));
  first.signal(SIGTERM);
  second.signal(SIGTERM);
  ASSERT_EQ(first.wait(kPatience), 0);
  ASSERT_EQ(second.wait(kPatience), 0);

  for (const char* worker : {"w0.safetensors", "w1.safetensors"}) {
    expectSameWeights(path("trainer.safetensors"), path(worker), 3);
  }
}

// 200 strangers keep knocking on the trainer's port through five rounds: every round commits with the trainer's
// bytes, the port refuses them between rounds, and whatever connection the trainer accepted during an admission
// was closed within the hello deadline's bound.
TEST_F(TcpRounds, StrangersKnockingOnTheTrainersPortCostNoRoundAndAreDroppedWithinTheDeadline) {
  auto first = startWorker("w0", agentArgs({"--dump", path("w0.safetensors")}));
  auto second = startWorker("w1", agentArgs({"--dump", path("w1.safetensors")}));
  waitForAgents(2);
  auto trainer =
      startTrainer("t0", agentArgs({"--steps", "5", "--interval-ms", "100", "--dump", path("trainer.safetensors")}),
                   path("trainer.log"));
  const BoundAddress bound = listenerAddress(path("trainer.log"));
  ASSERT_EQ(bound.host, "127.0.0.1") << "the listener is not bound to the bus's own address: "
                                     << readTextFile(path("trainer.log"));
  Crowd crowd(bound.port, 200);
  for (std::uint64_t version = 1; version <= 5; ++version) {
    const auto outcome = nextOutcome();
    EXPECT_TRUE(outcome.committed) << outcome.detail;
    EXPECT_EQ(outcome.version, version);
  }
  EXPECT_EQ(trainer.wait(kPatience), 0);
  crowd.stop();
  EXPECT_GT(crowd.refused(), 0U) << "the port never refused a connection";
  EXPECT_EQ(crowd.late(), 0U) << "of " << crowd.accepted() << " accepted strangers, " << crowd.late()
                              << " were held past " << kDropBound.count() << " ms";
  std::cout << "strangers: " << crowd.refused() << " refused, " << crowd.accepted() << " accepted and dropped\n";
  EXPECT_TRUE(waitForApplied("w0", 5));
  EXPECT_TRUE(waitForApplied("w1", 5));
  first.signal(SIGTERM);
  second.signal(SIGTERM);
  ASSERT_EQ(first.wait(kPatience), 0);
  ASSERT_EQ(second.wait(kPatience), 0);
  for (const char* worker : {"w0.safetensors", "w1.safetensors"}) {
    expectSameWeights(path("trainer.safetensors"), path(worker), 5);
  }
}

// Between rounds the trainer holds its port (nobody else can bind it) but does not listen: a connect is refused.
TEST_F(TcpRounds, BetweenRoundsTheTrainersPortRefusesConnectionsAndStaysItsOwn) {
  auto worker = startWorker("w0", agentArgs());
  waitForAgents(1);
  // One version, then a long pause before the next: the test looks in between.
  auto trainer = startTrainer("t0", agentArgs({"--steps", "0", "--interval-ms", "600000"}), path("trainer.log"));
  const BoundAddress bound = listenerAddress(path("trainer.log"));
  ASSERT_EQ(bound.host, "127.0.0.1") << readTextFile(path("trainer.log"));
  const auto outcome = nextOutcome();
  ASSERT_TRUE(outcome.committed) << outcome.detail;
  const auto [fd, error] = connectTo(bound.port);
  if (fd >= 0) ::close(fd);
  EXPECT_EQ(fd, -1) << "the trainer accepted a connection between rounds";
  EXPECT_EQ(error, ECONNREFUSED) << std::strerror(error);
  int port = bound.port;
  EXPECT_FALSE(bindable(port)) << "the trainer let its advertised port go";
  trainer.signal(SIGKILL);
  EXPECT_EQ(trainer.wait(kPatience), 128 + SIGKILL);
  worker.signal(SIGTERM);
  EXPECT_EQ(worker.wait(kPatience), 0);
}

TEST_F(TcpRounds, AWorkerKilledMidTransferCostsOneRoundAndTheNextCommits) {
  auto steady = startWorker("steady", agentArgs());
  auto doomed = startWorker("doomed", agentArgs({"--fault", "kill@transfer:2"}));
  waitForAgents(2);
  auto trainer = startTrainer("t0", agentArgs({"--steps", "0", "--interval-ms", "100"}));
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.version, 2U);
  // Whichever the coordinator hears first: the worker's death, or the trainer's channel naming the lost receiver;
  // never the other worker, whose connection the trainer keeps open until the round ends.
  if (aborted.reason == msg::AbortReason::ChannelFailure) {
    EXPECT_EQ(aborted.agentId, "t0");
    EXPECT_NE(aborted.detail.find("a peer is gone"), std::string::npos) << aborted.detail;
    // The trainer names the lost receiver by the agent id its hello gave.
    EXPECT_NE(aborted.detail.find("receiver 'doomed' (index "), std::string::npos) << aborted.detail;
  } else {
    EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
    EXPECT_EQ(aborted.agentId, "doomed");
  }
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL);
  EXPECT_EQ(appliedVersion("steady"), 1U) << "the surviving worker keeps the previous version";
  RoundOutcome outcome;
  do {
    outcome = nextOutcome();
  } while (!outcome.committed && outcome.version != 0);
  EXPECT_TRUE(outcome.committed) << outcome.detail;
  EXPECT_TRUE(waitForAppliedAtLeast("steady", outcome.version));
  trainer.signal(SIGTERM);
  EXPECT_EQ(trainer.wait(kPatience), 4) << "one of the trainer's steps was aborted";
}

// The workers lose their sender mid-transfer and wait for the round's end instead of reporting it: the abort names
// the trainer that died, not a worker that saw its connection close.
TEST_F(TcpRounds, ATrainerKilledMidTransferAbortsTheRoundInItsNameAndANewTrainerContinues) {
  auto worker = startWorker("w0", agentArgs());
  auto other = startWorker("w1", agentArgs());
  waitForAgents(2);
  auto doomed = startTrainer("t0", agentArgs({"--steps", "3", "--fault", "kill@transfer:2"}));
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::AgentDied) << aborted.detail;
  EXPECT_EQ(aborted.agentId, "t0") << aborted.detail;
  EXPECT_EQ(doomed.wait(kPatience), 128 + SIGKILL);
  EXPECT_EQ(appliedVersion("w0"), 1U);
  auto successor = startTrainer("t0", agentArgs({"--steps", "2"}));
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_EQ(successor.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 3));
  EXPECT_TRUE(waitForApplied("w1", 3));
}

TEST_F(TcpRounds, APayloadWhoseDigestDiffersIsNeverApplied) {
  auto honest = startWorker("honest", agentArgs());
  auto corrupted = startWorker("corrupted", agentArgs({"--fault", "corrupt-receive@2"}));
  waitForAgents(2);
  auto trainer = startTrainer("t0", agentArgs({"--steps", "2"}));
  EXPECT_TRUE(nextOutcome().committed);
  const auto aborted = nextOutcome();
  EXPECT_FALSE(aborted.committed);
  EXPECT_EQ(aborted.reason, msg::AbortReason::DigestMismatch) << aborted.detail;
  EXPECT_EQ(aborted.agentId, "corrupted");
  EXPECT_EQ(trainer.wait(kPatience), 4);
  EXPECT_EQ(appliedVersion("honest"), 1U);
  EXPECT_EQ(appliedVersion("corrupted"), 1U);
}

}  // namespace
}  // namespace wsync::test
