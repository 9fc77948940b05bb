// The tcp channel over loopback, in one process: every byte reaches one and three receivers with the shm channel's
// digest of the same tensors; a receiver that disconnects mid-transfer fails the sender with PeerGone at once, named
// by its agent id, and a receiver names its sender by its agent id; the cancel probe and the deadline end every
// wait; a wrong token, a stranger and a taken index are refused without disturbing the round; hundreds of silent or
// trickling strangers are dropped within the hello deadline while a real receiver is admitted among them; the port
// refuses connections between transfers and keeps its number; the listener is bound to the advertised address, not
// the wildcard; a receiver retries while the sender refuses connections or is on an earlier transfer.
// Also the contacts (parsing, the advertised host), the owner's grant and the registry's listeners.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "random_host_model.hpp"
#include "scoped_env.hpp"
#include "test_environment.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"
#include "wsync/bus/channel/tcp/tcp_address.hpp"
#include "wsync/bus/channel/tcp/tcp_channel.hpp"
#include "wsync/bus/channel/tcp/tcp_channel_owner.hpp"
#include "wsync/bus/channel/tcp/tcp_listener.hpp"

namespace wsync::bus {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Generous: a transfer of a few MB over loopback takes milliseconds; only a broken hand-off comes near it.
constexpr auto kTransferTimeout = 30s;
// How soon a side must notice a dead peer, a cancelled round or a passed deadline: a wait slice is 1 ms, so this is
// all scheduling slack on a loaded 2-core machine.
constexpr auto kPromptly = 2s;
// The buckets of these tests: small, so that progress is reported many times.
constexpr std::uint64_t kBucketBytes = 64 * 1024;
// A stranger that presented no hello must see its connection closed within this of its connect: the sender's hello
// deadline plus all the slack of a loaded machine. Well above the deadline, far below anything a stranger held
// without one would reach.
constexpr auto kDropBound = kTcpHelloDeadline + kPromptly;

using test::HostModel;
using test::makeHostModel;
using test::stagingFor;
using test::views;

std::vector<std::uint8_t> token(std::uint8_t seed) {
  std::vector<std::uint8_t> bytes(kTcpTokenBytes);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(seed * 31 + i);
  return bytes;
}

// What the shm channel reports for the same tensors and plan: the reference the tcp channel's digests must equal.
TransferResult shmReference(const HostModel& model, const BucketPlan& plan) {
  auto arena = ShmArena::create("wsync-test-tcpref-" + test::uniqueBusName("r"), {kBucketBytes, 2, 1});
  EXPECT_TRUE(arena.has_value()) << arena.error().describe();
  auto staging = stagingFor(model.manifest);
  tl::expected<TransferResult, ChannelFailure> received;
  std::thread receiver([&] { received = arena->receive(1, plan, views(staging), 0, Clock::now() + kTransferTimeout); });
  const std::vector<std::uint32_t> receivers{0};
  auto sent = arena->send(1, plan, views(model.tensors), receivers, Clock::now() + kTransferTimeout);
  receiver.join();
  EXPECT_TRUE(sent.has_value()) << sent.error().describe();
  EXPECT_TRUE(received.has_value()) << received.error().describe();
  return sent.value_or(TransferResult{});
}

class TcpChannelTest : public testing::Test {
 protected:
  void SetUp() override {
    auto listener = TcpListener::open("127.0.0.1");
    ASSERT_TRUE(listener.has_value()) << listener.error().describe();
    listener_ = std::move(*listener);
  }

  std::unique_ptr<TcpChannel> sender(const std::vector<std::uint8_t>& roundToken, std::string agentId = "t0") {
    auto channel =
        TcpChannel::open({listener_, listener_->contact(), roundToken, kTcpSenderGoneGrace, std::move(agentId)});
    EXPECT_TRUE(channel.has_value()) << channel.error().describe();
    return std::move(*channel);
  }
  std::unique_ptr<TcpChannel> receiver(const std::vector<std::uint8_t>& roundToken, std::string contact = {},
                                       std::chrono::milliseconds senderGoneGrace = kTcpSenderGoneGrace,
                                       std::string agentId = {}) {
    auto channel = TcpChannel::open(
        {nullptr, contact.empty() ? listener_->contact() : contact, roundToken, senderGoneGrace, std::move(agentId)});
    EXPECT_TRUE(channel.has_value()) << channel.error().describe();
    return std::move(*channel);
  }

  // One transfer of `model` to `count` receivers on threads; checks bytes, digests (against the shm channel's) and
  // that both sides reported their progress up to the whole payload.
  void transferTo(std::uint32_t count, std::uint64_t transfer, const HostModel& model) {
    auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
    ASSERT_TRUE(plan.has_value());
    const TransferResult reference = shmReference(model, *plan);
    const auto roundToken = token(static_cast<std::uint8_t>(transfer));

    std::vector<std::vector<std::vector<std::byte>>> staging(count, stagingFor(model.manifest));
    std::vector<tl::expected<TransferResult, ChannelFailure>> received(count);
    std::vector<std::uint64_t> receiverProgress(count, 0);
    std::vector<std::thread> threads;
    for (std::uint32_t r = 0; r < count; ++r) {
      threads.emplace_back([&, r] {
        auto channel = receiver(roundToken, {}, kTcpSenderGoneGrace, "w" + std::to_string(r));
        channel->setProgress([&, r](std::uint64_t bytes) { receiverProgress[r] = bytes; });
        received[r] = channel->receive(transfer, *plan, views(staging[r]), r, Clock::now() + kTransferTimeout);
      });
    }
    auto channel = sender(roundToken);
    std::uint64_t senderProgress = 0;
    channel->setProgress([&](std::uint64_t bytes) { senderProgress = bytes; });
    auto sent = channel->send(transfer, *plan, views(model.tensors), count, Clock::now() + kTransferTimeout);
    for (std::thread& thread : threads) thread.join();

    ASSERT_TRUE(sent.has_value()) << sent.error().describe();
    EXPECT_EQ(sent->bytes, model.manifest.totalBytes());
    EXPECT_EQ(sent->digest, reference.digest) << "the sender's digest is the shm channel's";
    EXPECT_EQ(senderProgress, model.manifest.totalBytes());
    for (std::uint32_t r = 0; r < count; ++r) {
      ASSERT_TRUE(received[r].has_value()) << "receiver " << r << ": " << received[r].error().describe();
      EXPECT_EQ(received[r]->bytes, sent->bytes);
      EXPECT_EQ(received[r]->digest, reference.digest) << "receiver " << r;
      EXPECT_EQ(receiverProgress[r], model.manifest.totalBytes()) << "receiver " << r;
      for (std::size_t t = 0; t < model.tensors.size(); ++t) {
        ASSERT_EQ(staging[r][t], model.tensors[t]) << "receiver " << r << ", tensor " << t;
      }
    }
  }

  std::shared_ptr<TcpListener> listener_;
};

TEST_F(TcpChannelTest, OneReceiverGetsEveryByteWithTheShmChannelsDigest) { transferTo(1, 1, makeHostModel(1, 60, 3)); }

// Several transfers through one listener, as a trainer's rounds go: each with its own token.
TEST_F(TcpChannelTest, ThreeReceiversGetEveryByteAcrossTransfers) {
  for (std::uint64_t transfer = 1; transfer <= 3; ++transfer) {
    SCOPED_TRACE("transfer " + std::to_string(transfer));
    transferTo(3, transfer, makeHostModel(transfer + 10, 40, 2));
  }
}

TEST_F(TcpChannelTest, AnEmptyPayloadStillCompletes) {
  transferTo(2, 1, HostModel{*Manifest::create({{"empty", msg::DType::F32, {0}}}), {{}}});
}

TEST_F(TcpChannelTest, AReceiverThatDisconnectsMidTransferFailsTheSenderAtOnceAndNoOneHangs) {
  const HostModel model = makeHostModel(2, 10, 64);  // far more than the sockets' buffers hold
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  const auto roundToken = token(7);
  std::vector<std::vector<std::vector<std::byte>>> staging(2, stagingFor(model.manifest));
  std::atomic<bool> quitting{false};
  tl::expected<TransferResult, ChannelFailure> quitter;
  tl::expected<TransferResult, ChannelFailure> bystander;
  Clock::time_point quitAt{};
  // The bystander (receiver 1) reads slowly, so that it is still reading when the other one quits.
  std::atomic<bool> bystanderReading{false};
  std::atomic<bool> roundEnded{false};  // what the coordinator's abort would tell the bystander's cancel probe
  std::thread second([&] {
    auto channel = receiver(roundToken, {}, kTcpSenderGoneGrace, "bystander");
    channel->setProgress([&](std::uint64_t) {
      bystanderReading = true;
      std::this_thread::sleep_for(1ms);
    });
    channel->setCancelProbe([&] { return roundEnded.load(); });
    bystander = channel->receive(1, *plan, views(staging[1]), 1, Clock::now() + kTransferTimeout);
  });
  std::thread first([&] {
    while (!bystanderReading.load()) std::this_thread::sleep_for(1ms);
    auto channel = receiver(roundToken, {}, kTcpSenderGoneGrace, "quitter");
    // Gives up once it has a few buckets: its socket closes with the rest unread, as a killed process's would.
    channel->setProgress([&](std::uint64_t bytes) {
      if (bytes > 8 * kBucketBytes && !quitting.exchange(true)) quitAt = Clock::now();
    });
    channel->setCancelProbe([&] { return quitting.load(); });
    quitter = channel->receive(1, *plan, views(staging[0]), 0, Clock::now() + kTransferTimeout);
  });
  auto sent = sender(roundToken)->send(1, *plan, views(model.tensors), 2, Clock::now() + kTransferTimeout);
  const auto failedAt = Clock::now();
  first.join();
  // The sender keeps the bystander's connection: it does not fail on its own (its report would race the sender's,
  // which names the receiver that went), but ends with the round.
  std::this_thread::sleep_for(100ms);
  roundEnded = true;
  const auto roundEndedAt = Clock::now();
  second.join();

  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::PeerGone) << sent.error().describe();
  // Named by the agent id its hello gave, then by its index and address.
  EXPECT_NE(sent.error().detail.find("receiver 'quitter' (index 0, 127.0.0.1:"), std::string::npos)
      << sent.error().describe();
  EXPECT_EQ(causeOf(sent.error().code), FailureCause::PeerStalled);
  ASSERT_TRUE(quitting.load());
  EXPECT_LT(failedAt - quitAt, kPromptly) << "the sender noticed the closed connection late";
  ASSERT_FALSE(quitter.has_value());
  EXPECT_EQ(quitter.error().code, ChannelError::Aborted);
  ASSERT_FALSE(bystander.has_value());
  EXPECT_EQ(bystander.error().code, ChannelError::Aborted) << bystander.error().describe();
  EXPECT_LT(Clock::now() - roundEndedAt, kPromptly);
}

// The sender goes mid-transfer (here: it gives up, and its channel is dropped). Its receivers wait for the round to
// end rather than report first (the coordinator learns why from the sender, or sees it die), and report the sender
// gone only when the round does not end within their grace.
TEST_F(TcpChannelTest, AReceiverWhoseSenderGoesWaitsForTheRoundsEndThenSaysTheSenderIsGone) {
  const HostModel model = makeHostModel(9, 10, 16);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  const auto roundToken = token(9);
  constexpr auto kGrace = 300ms;
  std::vector<std::vector<std::vector<std::byte>>> staging(2, stagingFor(model.manifest));
  std::atomic<int> reading{0};
  std::atomic<bool> roundEnded{false};
  std::vector<tl::expected<TransferResult, ChannelFailure>> results(2);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto channel = receiver(roundToken, {}, kGrace);
      bool counted = false;
      channel->setProgress([&](std::uint64_t) {
        if (!std::exchange(counted, true)) ++reading;
        std::this_thread::sleep_for(1ms);
      });
      if (r == 1) channel->setCancelProbe([&] { return roundEnded.load(); });
      results[r] = channel->receive(1, *plan, views(staging[r]), r, Clock::now() + kTransferTimeout);
    });
  }
  auto channel = sender(roundToken);
  channel->setCancelProbe([&] { return reading.load() == 2; });
  auto sent = channel->send(1, *plan, views(model.tensors), 2, Clock::now() + kTransferTimeout);
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::Aborted) << sent.error().describe();
  channel.reset();  // the sender's end goes: its connections close
  const auto goneAt = Clock::now();
  std::this_thread::sleep_for(kGrace / 3);
  roundEnded = true;
  for (std::thread& thread : threads) thread.join();

  ASSERT_FALSE(results[1].has_value());
  EXPECT_EQ(results[1].error().code, ChannelError::Aborted) << results[1].error().describe();
  EXPECT_NE(results[1].error().detail.find("the round ended meanwhile"), std::string::npos);
  ASSERT_FALSE(results[0].has_value());
  EXPECT_EQ(results[0].error().code, ChannelError::PeerGone) << results[0].error().describe();
  EXPECT_NE(results[0].error().detail.find("closed the connection"), std::string::npos);
  // Named by the agent id its answer gave.
  EXPECT_NE(results[0].error().detail.find("the tcp sender 't0' at " + listener_->contact()), std::string::npos)
      << results[0].error().describe();
  EXPECT_GE(Clock::now() - goneAt, kGrace);
  EXPECT_LT(Clock::now() - goneAt, kGrace + kPromptly);
}

TEST_F(TcpChannelTest, TheCancelProbeEndsEveryWait) {
  const HostModel model = makeHostModel(3, 5);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  const auto roundToken = token(3);
  // A second listener nobody sends on: a receiver connecting there is refused and tries again, while the sender on
  // the first waits for a receiver that never comes.
  auto idle = TcpListener::open("127.0.0.1");
  ASSERT_TRUE(idle.has_value());
  std::atomic<bool> cancelled{false};
  tl::expected<TransferResult, ChannelFailure> received;
  auto staging = stagingFor(model.manifest);
  const auto start = Clock::now();
  std::thread waitingReceiver([&] {
    auto channel = receiver(roundToken, (*idle)->contact());
    channel->setCancelProbe([&] { return cancelled.load(); });
    received = channel->receive(1, *plan, views(staging), 0, Clock::now() + kTransferTimeout);
  });
  std::thread canceller([&] {
    std::this_thread::sleep_for(200ms);
    cancelled = true;
  });
  auto channel = sender(roundToken);
  channel->setCancelProbe([&] { return cancelled.load(); });
  auto sent = channel->send(1, *plan, views(model.tensors), 1, Clock::now() + kTransferTimeout);
  canceller.join();
  waitingReceiver.join();

  ASSERT_FALSE(received.has_value());
  EXPECT_EQ(received.error().code, ChannelError::Aborted) << received.error().describe();
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::Aborted) << sent.error().describe();
  EXPECT_EQ(causeOf(sent.error().code), FailureCause::Cancelled);
  EXPECT_LT(Clock::now() - start, 200ms + kPromptly);
}

TEST_F(TcpChannelTest, TheDeadlineEndsEveryWait) {
  const HostModel model = makeHostModel(4, 5);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  const auto roundToken = token(4);
  constexpr auto kDeadline = 300ms;

  auto start = Clock::now();
  auto sent = sender(roundToken)->send(1, *plan, views(model.tensors), 2, start + kDeadline);
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::Timeout) << sent.error().describe();
  EXPECT_NE(sent.error().detail.find("2 of 2 receivers"), std::string::npos) << sent.error().describe();
  EXPECT_GE(Clock::now() - start, kDeadline);
  EXPECT_LT(Clock::now() - start, kDeadline + kPromptly);

  // Nobody listens at the contact: the receiver keeps trying until its deadline and says what it last heard.
  std::string closed;
  {
    auto gone = TcpListener::open("127.0.0.1");
    ASSERT_TRUE(gone.has_value());
    closed = (*gone)->contact();
  }
  auto staging = stagingFor(model.manifest);
  start = Clock::now();
  auto received = receiver(roundToken, closed)->receive(1, *plan, views(staging), 0, start + kDeadline);
  ASSERT_FALSE(received.has_value());
  EXPECT_EQ(received.error().code, ChannelError::Timeout) << received.error().describe();
  EXPECT_NE(received.error().detail.find("refused"), std::string::npos) << received.error().describe();
  EXPECT_LT(Clock::now() - start, kDeadline + kPromptly);
}

// A raw connection to the listener: a stranger on the network. The descriptor, or -1 and the connect's errno.
struct RawConnection {
  int fd = -1;
  int error = 0;
};

RawConnection connectRaw(std::uint16_t port) {
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

// A stranger's connection once the sender listens (it refuses connections until its send begins): -1 if it never
// does within the transfer's timeout.
int connectWhenListening(std::uint16_t port) {
  const auto until = Clock::now() + kTransferTimeout;
  while (Clock::now() < until) {
    const RawConnection connection = connectRaw(port);
    if (connection.fd >= 0) return connection.fd;
    std::this_thread::sleep_for(1ms);
  }
  return -1;
}

// The first bytes of a hello as a receiver of this wire version sends them (magic "WSYNCTP1", version 3): a sender
// reading them waits for the rest, which a trickling stranger never completes in time.
constexpr std::array<std::uint8_t, 12> kHelloStart{'W', 'S', 'Y', 'N', 'C', 'T', 'P', '1', 3, 0, 0, 0};

// Strangers' connections to a sender, silent or trickling the start of a hello a byte at a time, watched from their
// side: when each one sees its connection closed (end of stream or reset), and whether the sender ever sent one of
// them a byte.
class Strangers {
 public:
  // One byte per trickling stranger this often: a hello of kTcpHelloDeadline's worth never completes.
  static constexpr auto kTrickleInterval = 20ms;

  ~Strangers() {
    for (Stranger& stranger : strangers_) {
      if (stranger.fd >= 0) ::close(stranger.fd);
    }
  }
  // Connects `silent` and `trickling` strangers once the sender at `port` listens; false if one could not connect.
  bool connect(std::uint16_t port, int silent, int trickling) {
    for (int index = 0; index < silent + trickling; ++index) {
      const int fd = connectWhenListening(port);
      if (fd < 0) return false;
      strangers_.push_back(Stranger{fd, index >= silent, Clock::now()});
    }
    return true;
  }
  // Trickles and watches until every stranger's connection closed, or kDropBound passed since its connect.
  void watchUntilClosedOrLate() {
    std::vector<pollfd> fds;
    while (true) {
      const auto now = Clock::now();
      fds.clear();
      for (Stranger& stranger : strangers_) {
        if (stranger.closedAfter || now - stranger.connectedAt > kDropBound) continue;
        if (stranger.trickling && now >= stranger.nextByte) {
          // The hello's start, then zeroes: a hello that comes a byte at a time and never whole in time.
          const std::uint8_t next = stranger.sent < kHelloStart.size() ? kHelloStart[stranger.sent] : 0;
          const ssize_t sent = ::send(stranger.fd, &next, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (sent == 1) ++stranger.sent;
          stranger.nextByte = now + kTrickleInterval;
        }
        fds.push_back(pollfd{stranger.fd, POLLIN, 0});
      }
      if (fds.empty()) return;
      (void)::poll(fds.data(), fds.size(), 5);
      for (const pollfd& polled : fds) {
        if (polled.revents == 0) continue;
        Stranger& stranger = *std::find_if(strangers_.begin(), strangers_.end(),
                                           [&](const Stranger& candidate) { return candidate.fd == polled.fd; });
        std::byte byte{};
        const ssize_t got = ::recv(stranger.fd, &byte, 1, MSG_DONTWAIT);
        if (got > 0) {
          ++stranger.received;
        } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          stranger.closedAfter = Clock::now() - stranger.connectedAt;
        }
      }
    }
  }
  // One line per stranger that was not closed within kDropBound, or was sent a byte: empty when all went well.
  std::string problems() const {
    std::string found;
    for (std::size_t index = 0; index < strangers_.size(); ++index) {
      const Stranger& stranger = strangers_[index];
      const std::string which =
          (stranger.trickling ? "trickling stranger " : "silent stranger ") + std::to_string(index);
      if (!stranger.closedAfter || *stranger.closedAfter > kDropBound) found += which + " was not closed in time\n";
      if (stranger.received > 0) found += which + " was sent " + std::to_string(stranger.received) + " bytes\n";
    }
    return found;
  }
  std::size_t size() const { return strangers_.size(); }

 private:
  struct Stranger {
    int fd = -1;
    bool trickling = false;
    Clock::time_point connectedAt{};
    Clock::time_point nextByte{};
    std::size_t sent = 0;
    std::size_t received = 0;
    std::optional<Clock::duration> closedAfter{};
  };
  std::vector<Stranger> strangers_;
};

TEST_F(TcpChannelTest, AWrongTokenAStrangerAndATakenIndexAreRefusedAndTheRoundGoesOn) {
  const HostModel model = makeHostModel(5, 30, 2);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  const auto roundToken = token(5);
  // In turn: strangers that send garbage or nothing at all, connected once the sender listens; a receiver with
  // another token; receiver 0, slowly; a second connection claiming index 0 while the sender still waits for
  // receiver 1; receiver 1.
  std::vector<std::vector<std::vector<std::byte>>> staging(4, stagingFor(model.manifest));
  std::vector<tl::expected<TransferResult, ChannelFailure>> results(4);
  std::atomic<int> step{-1};
  auto await = [&](int wanted) {
    while (step.load() < wanted) std::this_thread::sleep_for(1ms);
  };
  int garbage = -1;
  int silent = -1;
  std::thread strangers([&] {
    garbage = connectWhenListening(listener_->port());
    silent = connectWhenListening(listener_->port());
    const std::vector<std::uint8_t> noise(48, std::uint8_t{0x5a});
    if (garbage >= 0) (void)::send(garbage, noise.data(), noise.size(), MSG_NOSIGNAL);
    step = 0;
  });
  std::thread intruder([&] {
    await(0);
    results[0] = receiver(token(99))->receive(1, *plan, views(staging[0]), 0, Clock::now() + kTransferTimeout);
    step = 1;
  });
  std::thread first([&] {
    await(1);
    auto channel = receiver(roundToken);
    channel->setProgress([&](std::uint64_t) {
      if (step.load() == 1) step = 2;  // admitted and reading
      std::this_thread::sleep_for(1ms);
    });
    results[1] = channel->receive(1, *plan, views(staging[1]), 0, Clock::now() + kTransferTimeout);
  });
  std::thread twin([&] {
    await(2);
    results[2] = receiver(roundToken)->receive(1, *plan, views(staging[2]), 0, Clock::now() + kTransferTimeout);
    step = 3;
  });
  std::thread second([&] {
    await(3);
    results[3] = receiver(roundToken)->receive(1, *plan, views(staging[3]), 1, Clock::now() + kTransferTimeout);
  });
  auto sent = sender(roundToken)->send(1, *plan, views(model.tensors), 2, Clock::now() + kTransferTimeout);
  for (std::thread* thread : {&strangers, &intruder, &first, &twin, &second}) thread->join();
  ASSERT_GE(garbage, 0);
  ASSERT_GE(silent, 0);
  ::close(garbage);
  ::close(silent);

  ASSERT_FALSE(results[0].has_value());
  EXPECT_EQ(results[0].error().code, ChannelError::Refused) << results[0].error().describe();
  EXPECT_NE(results[0].error().detail.find("token"), std::string::npos) << results[0].error().describe();
  EXPECT_NE(staging[0], model.tensors);
  ASSERT_FALSE(results[2].has_value());
  EXPECT_EQ(results[2].error().code, ChannelError::Refused) << results[2].error().describe();
  EXPECT_NE(results[2].error().detail.find("receiver index"), std::string::npos) << results[2].error().describe();
  ASSERT_TRUE(sent.has_value()) << sent.error().describe();
  for (const std::size_t index : {std::size_t{1}, std::size_t{3}}) {
    ASSERT_TRUE(results[index].has_value()) << results[index].error().describe();
    EXPECT_EQ(results[index]->digest, sent->digest);
    EXPECT_EQ(staging[index], model.tensors);
  }
}

// Strangers by the hundred hold connections open to the sender while it admits: silent ones, and a few that trickle
// the start of a hello. A real receiver is admitted among them, every stranger sees its connection closed within the
// hello deadline (while the sender still waits for its second receiver, so nothing but the deadline closed them),
// none is sent a byte, and the transfer completes with every byte.
TEST_F(TcpChannelTest, SilentAndTricklingStrangersAreDroppedWithinTheHelloDeadlineAndTheTransferCompletes) {
  constexpr int kSilent = 200;
  constexpr int kTrickling = 4;
  const HostModel model = makeHostModel(21, 30, 2);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  const auto roundToken = token(21);
  std::vector<std::vector<std::vector<std::byte>>> staging(2, stagingFor(model.manifest));
  std::vector<tl::expected<TransferResult, ChannelFailure>> results(2);
  Strangers strangers;
  std::atomic<int> step{0};  // 1: the strangers are connected; 2: they all saw their connections closed
  auto await = [&](int wanted) {
    while (step.load() < wanted) std::this_thread::sleep_for(1ms);
  };
  bool connected = false;
  std::thread crowd([&] {
    connected = strangers.connect(listener_->port(), kSilent, kTrickling);
    step = 1;
    strangers.watchUntilClosedOrLate();
    step = 2;
  });
  std::thread first([&] {
    await(1);  // among the strangers, still pending
    results[0] = receiver(roundToken, {}, kTcpSenderGoneGrace, "w0")
                     ->receive(1, *plan, views(staging[0]), 0, Clock::now() + kTransferTimeout);
  });
  std::thread second([&] {
    await(2);
    results[1] = receiver(roundToken, {}, kTcpSenderGoneGrace, "w1")
                     ->receive(1, *plan, views(staging[1]), 1, Clock::now() + kTransferTimeout);
  });
  auto sent = sender(roundToken)->send(1, *plan, views(model.tensors), 2, Clock::now() + kTransferTimeout);
  for (std::thread* thread : {&crowd, &first, &second}) thread->join();

  ASSERT_TRUE(connected) << "the strangers could not connect while the sender admitted its receivers";
  EXPECT_EQ(strangers.size(), std::size_t{kSilent + kTrickling});
  EXPECT_EQ(strangers.problems(), "");
  ASSERT_TRUE(sent.has_value()) << sent.error().describe();
  for (std::size_t index = 0; index < results.size(); ++index) {
    ASSERT_TRUE(results[index].has_value()) << results[index].error().describe();
    EXPECT_EQ(results[index]->digest, sent->digest);
    EXPECT_EQ(staging[index], model.tensors) << "receiver " << index;
  }
}

// The port is bound for the listener's life and listens only while a send admits: before the first transfer,
// between two, and after a failed one, a connect is refused; every transfer finds its receivers at the same contact.
TEST_F(TcpChannelTest, ThePortRefusesConnectionsBetweenTransfersAndKeepsItsNumber) {
  const std::uint16_t port = listener_->port();
  const std::string contact = listener_->contact();
  auto expectRefused = [&](const char* when) {
    const RawConnection connection = connectRaw(port);
    if (connection.fd >= 0) ::close(connection.fd);
    EXPECT_EQ(connection.fd, -1) << "a connection was accepted " << when;
    EXPECT_EQ(connection.error, ECONNREFUSED) << when << ": " << std::strerror(connection.error);
  };
  expectRefused("before any transfer");
  transferTo(2, 1, makeHostModel(31, 10, 1));
  expectRefused("after a transfer");
  const HostModel model = makeHostModel(32, 5);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  auto failed = sender(token(2))->send(2, *plan, views(model.tensors), 1, Clock::now() + 200ms);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ChannelError::Timeout) << failed.error().describe();
  expectRefused("after a transfer that timed out");
  transferTo(1, 3, makeHostModel(33, 10, 1));
  expectRefused("after the next transfer");
  EXPECT_EQ(listener_->port(), port);
  EXPECT_EQ(listener_->contact(), contact);
}

// The coordinator sends the receivers' plans before the sender's: a receiver that connects before the sender listens
// is refused, and connects again until it is admitted.
TEST_F(TcpChannelTest, AReceiverThatConnectsBeforeTheSenderListensTriesAgainAndGetsEveryByte) {
  const HostModel model = makeHostModel(34, 20, 1);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  auto staging = stagingFor(model.manifest);
  std::atomic<bool> receiving{false};
  tl::expected<TransferResult, ChannelFailure> received;
  std::thread early([&] {
    auto channel = receiver(token(34), {}, kTcpSenderGoneGrace, "w0");
    receiving = true;
    received = channel->receive(1, *plan, views(staging), 0, Clock::now() + kTransferTimeout);
  });
  while (!receiving.load()) std::this_thread::sleep_for(1ms);
  // Long enough for several of its attempts to be refused: what the receiver meets, as this connect shows.
  std::this_thread::sleep_for(100ms);
  const RawConnection probe = connectRaw(listener_->port());
  EXPECT_EQ(probe.error, ECONNREFUSED) << "the sender listened before its send";
  if (probe.fd >= 0) ::close(probe.fd);
  auto sent = sender(token(34))->send(1, *plan, views(model.tensors), 1, Clock::now() + kTransferTimeout);
  early.join();
  ASSERT_TRUE(sent.has_value()) << sent.error().describe();
  ASSERT_TRUE(received.has_value()) << received.error().describe();
  EXPECT_EQ(received->digest, sent->digest);
  EXPECT_EQ(staging, model.tensors);
}

// A receiver that stops reading holds the transfer until its deadline, and the sender's Timeout names it.
TEST_F(TcpChannelTest, AReceiverThatStallsIsNamedByItsAgentIdInTheSendersTimeout) {
  const HostModel model = makeHostModel(35, 5, 64);  // far more than the sockets' buffers hold
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  auto staging = stagingFor(model.manifest);
  std::atomic<bool> stalled{false};
  std::atomic<bool> roundEnded{false};
  tl::expected<TransferResult, ChannelFailure> received;
  std::thread slow([&] {
    auto channel = receiver(token(35), {}, kTcpSenderGoneGrace, "slow-w");
    channel->setCancelProbe([&] { return roundEnded.load(); });
    channel->setProgress([&](std::uint64_t) {
      stalled = true;
      while (!roundEnded.load()) std::this_thread::sleep_for(1ms);
    });
    received = channel->receive(1, *plan, views(staging), 0, Clock::now() + kTransferTimeout);
  });
  // Admitted and stalled within milliseconds; the deadline only has to come after that.
  auto sent = sender(token(35))->send(1, *plan, views(model.tensors), 1, Clock::now() + kPromptly);
  roundEnded = true;
  slow.join();

  ASSERT_TRUE(stalled.load()) << "the receiver never read a bucket";
  ASSERT_FALSE(sent.has_value());
  EXPECT_EQ(sent.error().code, ChannelError::Timeout) << sent.error().describe();
  EXPECT_NE(sent.error().detail.find("sending to 1 of 1 receivers (receiver 'slow-w' (index 0, 127.0.0.1:"),
            std::string::npos)
      << sent.error().describe();
}

TEST_F(TcpChannelTest, AReceiverOfTheNextTransferIsToldToComeBackAndGetsIt) {
  const HostModel first = makeHostModel(6, 10, 4);
  const HostModel second = makeHostModel(7, 10, 1);
  auto plan = BucketPlan::build(first.manifest, kBucketBytes, 256);
  auto nextPlan = BucketPlan::build(second.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value() && nextPlan.has_value());
  std::vector<std::vector<std::vector<std::byte>>> firstStaging(2, stagingFor(first.manifest));
  auto secondStaging = stagingFor(second.manifest);
  std::vector<tl::expected<TransferResult, ChannelFailure>> current(2);
  tl::expected<TransferResult, ChannelFailure> early;
  std::atomic<bool> firstAdmitted{false};
  // Transfer 1 waits for its receiver 1 while the receiver of transfer 2 connects, is told Later, and comes back
  // until the sender gets to transfer 2.
  std::thread zero([&] {
    auto channel = receiver(token(1));
    channel->setProgress([&](std::uint64_t) { firstAdmitted = true; });
    current[0] = channel->receive(1, *plan, views(firstStaging[0]), 0, Clock::now() + kTransferTimeout);
  });
  std::thread eager([&] {
    while (!firstAdmitted.load()) std::this_thread::sleep_for(1ms);
    early = receiver(token(2))->receive(2, *nextPlan, views(secondStaging), 0, Clock::now() + kTransferTimeout);
  });
  std::thread one([&] {
    while (!firstAdmitted.load()) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(100ms);  // the eager receiver is told Later several times meanwhile
    current[1] = receiver(token(1))->receive(1, *plan, views(firstStaging[1]), 1, Clock::now() + kTransferTimeout);
  });
  auto sent = sender(token(1))->send(1, *plan, views(first.tensors), 2, Clock::now() + kTransferTimeout);
  auto sentNext = sender(token(2))->send(2, *nextPlan, views(second.tensors), 1, Clock::now() + kTransferTimeout);
  for (std::thread* thread : {&zero, &eager, &one}) thread->join();
  ASSERT_TRUE(sent.has_value()) << sent.error().describe();
  for (const auto& result : current) ASSERT_TRUE(result.has_value()) << result.error().describe();
  ASSERT_TRUE(sentNext.has_value()) << sentNext.error().describe();
  ASSERT_TRUE(early.has_value()) << early.error().describe();
  EXPECT_EQ(early->digest, sentNext->digest);
  EXPECT_EQ(secondStaging, second.tensors);
}

TEST_F(TcpChannelTest, APlanThatDoesNotFitTheBoundTensorsMovesNothing) {
  const HostModel model = makeHostModel(8, 5, 1);
  auto plan = BucketPlan::build(model.manifest, kBucketBytes, 256);
  ASSERT_TRUE(plan.has_value());
  auto staging = stagingFor(model.manifest);
  staging.back().resize(staging.back().size() / 2);
  auto received = receiver(token(8))->receive(1, *plan, views(staging), 0, Clock::now() + 100ms);
  ASSERT_FALSE(received.has_value());
  EXPECT_EQ(received.error().code, ChannelError::PlanMismatch) << received.error().describe();
}

TEST(TcpChannel, OpenChecksTheTokenAndTheContact) {
  EXPECT_EQ(TcpChannel::open({nullptr, "127.0.0.1:5000", {1, 2, 3}}).error().code, ChannelError::InvalidGeometry);
  EXPECT_EQ(TcpChannel::open({nullptr, "127.0.0.1", token(1)}).error().code, ChannelError::InvalidGeometry);
  auto channel = TcpChannel::open({nullptr, "127.0.0.1:5000", token(1)});
  ASSERT_TRUE(channel.has_value()) << channel.error().describe();
  EXPECT_EQ((*channel)->key(), tcpChannelKey("127.0.0.1:5000", token(1)));
  EXPECT_NE((*channel)->key(), tcpChannelKey("127.0.0.1:5000", token(2)));
  EXPECT_EQ((*channel)->tensorMemory(), TensorMemory::Host);
}

TEST(TcpAddress, ContactsParseAndFormat) {
  EXPECT_EQ(formatTcpContact("10.0.0.7", 4100), "10.0.0.7:4100");
  EXPECT_EQ(formatTcpContact("fd00::7", 4100), "[fd00::7]:4100");
  auto v4 = parseTcpContact("10.0.0.7:4100");
  ASSERT_TRUE(v4.has_value());
  EXPECT_EQ(v4->host, "10.0.0.7");
  EXPECT_EQ(v4->port, 4100);
  auto v6 = parseTcpContact("[fd00::7]:4100");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->host, "fd00::7");
  auto name = parseTcpContact("node-7.cluster:65535");
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->host, "node-7.cluster");
  for (const char* bad : {"", ":4100", "10.0.0.7", "10.0.0.7:0", "10.0.0.7:65536", "10.0.0.7:41x", "fd00::7:4100",
                          "[]:4100", "a b:4100", "tcp://10.0.0.7:4100"}) {
    EXPECT_FALSE(parseTcpContact(bad).has_value()) << bad;
  }
}

TEST(TcpAddress, TheAdvertisedHostIsTheRouteToTheCoordinatorUnlessTheEnvironmentNamesOne) {
  {
    test::ScopedEnv unset(kPayloadHostVariable, "");
    EXPECT_EQ(advertisedPayloadHost("ipc").value_or("?"), "127.0.0.1");
    EXPECT_EQ(advertisedPayloadHost("tcp://127.0.0.1:5555").value_or("?"), "127.0.0.1");
    EXPECT_EQ(advertisedPayloadHost("tcp://lo;127.0.0.1:5555").value_or("?"), "127.0.0.1");
  }
  {
    test::ScopedEnv chosen(kPayloadHostVariable, "203.0.113.9");
    EXPECT_EQ(advertisedPayloadHost("tcp://127.0.0.1:5555").value_or("?"), "203.0.113.9");
  }
  {
    test::ScopedEnv hostile(kPayloadHostVariable, "host name\n");
    EXPECT_EQ(advertisedPayloadHost("ipc").error().code, ChannelError::InvalidGeometry);
  }
}

TEST(TcpChannelOwner, GrantsAFreshTokenAndTheSendersContact) {
  TcpChannelOwner owner;
  EXPECT_TRUE(owner.crossesHosts());
  EXPECT_EQ(owner.tensorMemory(), TensorMemory::Host);
  EXPECT_EQ(owner.maxReceivers(), kMaxTcpReceivers);
  ChannelMember sender{"t0", "t0-routing", false, "node-a", {{msg::ChannelKind::Tcp, "10.0.0.7:4100"}}};
  const std::vector<ChannelMember> receivers{{"w0", "w0-routing", false, "node-b", {}}};
  auto first = owner.prepare(sender, receivers);
  auto second = owner.prepare(sender, receivers);
  ASSERT_TRUE(first.has_value()) << first.error();
  ASSERT_TRUE(second.has_value()) << second.error();
  EXPECT_EQ(first->senderContact, "10.0.0.7:4100");
  EXPECT_EQ(first->groupId.size(), kTcpTokenBytes);
  EXPECT_NE(first->groupId, second->groupId) << "every round gets its own token";
  EXPECT_FALSE(first->ranked);
  EXPECT_TRUE(owner.prepare(sender, {}).has_value()) << "a round without receivers needs no contact";

  sender.contacts = {{msg::ChannelKind::Shm, "ignored"}};
  auto refused = owner.prepare(sender, receivers);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().find("the sender 't0' offered no tcp contact"), std::string::npos) << refused.error();
  const std::vector<ChannelMember> crowd(kMaxTcpReceivers + 1, receivers.front());
  EXPECT_FALSE(owner.prepare(sender, crowd).has_value());
}

// The address a listener's socket is bound to, read back from the kernel.
std::string boundHost(const TcpListener& listener) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  const void* address = bound.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(bound).sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(bound).sin_addr);
  return ::inet_ntop(bound.ss_family, address, text, sizeof text) == nullptr ? "?" : text;
}

TEST(TcpListener, IsBoundToTheAdvertisedAddressNeverTheWildcard) {
  // 127.0.0.2 is this host's too (all of 127/8 is), and not the address every other test binds.
  for (const char* host : {"127.0.0.1", "127.0.0.2"}) {
    auto listener = TcpListener::open(host);
    ASSERT_TRUE(listener.has_value()) << listener.error().describe();
    EXPECT_EQ(boundHost(**listener), host);
    EXPECT_EQ((*listener)->boundAddress(), formatTcpContact(host, (*listener)->port()));
    EXPECT_EQ((*listener)->contact(), formatTcpContact(host, (*listener)->port()));
    EXPECT_FALSE((*listener)->listening());
  }
  // A name: bound to an address it resolves to, whichever this host has.
  auto named = TcpListener::open("localhost");
  ASSERT_TRUE(named.has_value()) << named.error().describe();
  const std::string host = boundHost(**named);
  EXPECT_TRUE(host == "127.0.0.1" || host == "::1") << host;
  EXPECT_EQ((*named)->contact(), formatTcpContact("localhost", (*named)->port()));
}

TEST(ChannelListenersTest, OnlyTheTcpChannelBindsAndItsContactRefusesConnectionsUntilASend) {
  test::ScopedEnv unset(kPayloadHostVariable, "");
  const std::vector<msg::ChannelKind> shm{msg::ChannelKind::Shm};
  auto none = openChannelListeners(shm, "ipc");
  ASSERT_TRUE(none.has_value()) << none.error().describe();
  EXPECT_TRUE((*none)->contacts().empty());
  const std::vector<msg::ChannelKind> tcp{msg::ChannelKind::Tcp};
  auto listeners = openChannelListeners(tcp, "tcp://127.0.0.1:5555");
  ASSERT_TRUE(listeners.has_value()) << listeners.error().describe();
  ASSERT_EQ((*listeners)->contacts().size(), 1U);
  const ChannelContact& contact = (*listeners)->contacts().front();
  EXPECT_EQ(contact.kind, msg::ChannelKind::Tcp);
  auto parsed = parseTcpContact(contact.address);
  ASSERT_TRUE(parsed.has_value()) << contact.address;
  EXPECT_EQ(parsed->host, "127.0.0.1");
  // Bound (the port is this agent's for its life) but not listening: nobody is admitted between sends.
  const RawConnection connection = connectRaw(parsed->port);
  if (connection.fd >= 0) ::close(connection.fd);
  EXPECT_EQ(connection.error, ECONNREFUSED) << contact.address << ": " << std::strerror(connection.error);
  // And the port is held: nobody else binds it meanwhile.
  const int other = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(parsed->port);
  const int bound = ::bind(other, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int error = errno;
  ::close(other);
  EXPECT_NE(bound, 0) << "another socket could bind the listener's port";
  EXPECT_EQ(error, EADDRINUSE) << std::strerror(error);
}

}  // namespace
}  // namespace wsync::bus
