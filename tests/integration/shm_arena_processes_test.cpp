// The shm arena across real processes: this test process owns the arena (creates it, aborts transfers) and
// tests/helpers/arena_peer.cpp, started as separate processes, sends and receives through it. Every byte reaches
// every receiver process over consecutive transfers; a receiver or a sender killed mid-transfer leaves its peers
// with Aborted or Timeout, never a hang, and the next transfer with the survivors goes through. No assertion on
// time: every wait has a generous bound, so a hang fails a test instead of blocking it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "test_environment.hpp"
#include "wsync/bus/channel/bucket_plan.hpp"
#include "wsync/bus/channel/shm/shm_arena.hpp"
#include "wsync/bus/channel/shm/shm_arena_data.hpp"
#include "wsync/cli/child_process.hpp"
#include "wsync/cli/model_catalog.hpp"

namespace wsync::bus {
namespace {

namespace bip = boost::interprocess;
using cli::ChildProcess;

// A peer's own bound on each transfer: longer than any wait below, so that a stuck peer is ended by what the test
// does (a kill, an abort) or fails the test, never ended by its own deadline while the test looks the other way.
constexpr std::chrono::milliseconds kPeerDeadline{60'000};
// A peer whose sender is dead and which nobody aborts must give up by itself within this.
constexpr std::chrono::milliseconds kShortPeerDeadline{300};
// Generous bounds on what takes milliseconds on an idle machine: starting peers and moving a megabyte, a peer's
// exit once released. Shared CI machines and sanitizer builds can be slow.
constexpr std::chrono::milliseconds kProgressTimeout{20'000};
constexpr std::chrono::milliseconds kExitTimeout{20'000};
constexpr std::chrono::milliseconds kPollInterval{2};

// arena_peer's exit codes (see its usage).
constexpr int kPeerOk = 0;
constexpr int kPeerTimedOut = 3;
constexpr int kPeerAborted = 4;
// What ChildProcess::wait reports for a SIGKILLed process.
constexpr int kKilled = 128 + SIGKILL;

// Two 64 KiB buffers and a megabyte of tensors: every buffer is refilled several times per transfer.
constexpr ArenaGeometry kGeometry{64 * 1024, 2, 3};
constexpr const char* kModel = "synthetic:40:1";
// arena_peer's plan alignment, so that the test can count the buckets the peers move.
constexpr std::uint32_t kPlanAlignment = 256;
constexpr const char* kSeed = "20261122";

std::string arenaName() { return "wsync-test-arena-" + test::uniqueBusName("p"); }

// The ticket of `bucket` of `transfer`, as docs/shm-channel.md defines it.
std::uint64_t ticketOf(std::uint64_t transfer, std::uint32_t bucket) {
  return (transfer << 32) | (std::uint64_t{bucket} + 1);
}

// Reads the arena's tickets through a read-only mapping of its own, so that the test knows where each peer is
// before it kills one, instead of sleeping and hoping.
class ArenaProbe {
 public:
  explicit ArenaProbe(const std::string& name)
      : region_(bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_only), bip::read_only) {}

  // The ticket of the bucket last published into `buffer`.
  std::uint64_t filled(std::uint32_t buffer) const {
    return control().fills[buffer].ticket.load(std::memory_order_acquire);
  }
  // The ticket `receiver` last copied out of `buffer`.
  std::uint64_t drained(std::uint32_t buffer, std::uint32_t receiver) const {
    return control().drains[buffer][receiver].ticket.load(std::memory_order_acquire);
  }

 private:
  const ArenaControlData& control() const { return *static_cast<const ArenaControlData*>(region_.get_address()); }
  bip::mapped_region region_;
};

template <typename Condition>
bool eventually(Condition&& condition, std::chrono::milliseconds timeout = kProgressTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

// One line a peer printed: "transfer T bytes B digest HEX".
struct Reported {
  std::uint64_t transfer = 0;
  std::uint64_t bytes = 0;
  std::string digest;

  friend bool operator==(const Reported&, const Reported&) = default;
};

void PrintTo(const Reported& reported, std::ostream* out) {
  *out << "{transfer " << reported.transfer << ", " << reported.bytes << " bytes, digest " << reported.digest << "}";
}

struct Peer {
  ChildProcess process;
  std::string outputPath;  // the peer's stdout

  std::vector<Reported> reported() const {
    std::ifstream in(outputPath);
    std::vector<Reported> lines;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string transferWord;
      std::string bytesWord;
      std::string digestWord;
      Reported reported;
      fields >> transferWord >> reported.transfer >> bytesWord >> reported.bytes >> digestWord >> reported.digest;
      if (!fields || transferWord != "transfer" || bytesWord != "bytes" || digestWord != "digest") {
        throw std::runtime_error(outputPath + ": unexpected line '" + line + "'");
      }
      lines.push_back(reported);
    }
    return lines;
  }
};

// ChildProcess gives a child this process's stdout. Pointing fd 1 at a file of the peer's own for the duration of
// the spawn gives each peer its own stdout, read back once it has exited, with no pipe to keep drained.
Peer startPeer(const std::vector<std::string>& args) {
  static std::atomic<int> peers{0};
  const std::string path = test::useTemporaryRuntimeDirectory() + "/arena-peer-" + std::to_string(peers++) + ".out";
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (file < 0) throw std::runtime_error("cannot create " + path);
  std::fflush(stdout);
  const int saved = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
  ::dup2(file, STDOUT_FILENO);  // the duplicate has no close-on-exec flag: the child inherits it as its stdout
  ::close(file);
  std::optional<ChildProcess> child;
  std::exception_ptr error;
  try {
    child.emplace(ChildProcess::spawn(WSYNC_ARENA_PEER, args));
  } catch (...) {
    error = std::current_exception();
  }
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  if (error) std::rethrow_exception(error);
  return Peer{std::move(*child), path};
}

Peer startReceiver(const std::string& arena, std::uint64_t first, std::uint64_t count, std::uint32_t receiver,
                   std::chrono::milliseconds deadline = kPeerDeadline) {
  return startPeer({"receive", arena, std::to_string(first), std::to_string(count), std::to_string(receiver), kModel,
                    kSeed, std::to_string(deadline.count())});
}

// `send` starts each transfer once the receivers have drained the one before, as the update round does (it waits
// for every worker's UpdateDone); `send-nowait` starts it as soon as send() has returned.
Peer startSender(const std::string& arena, std::uint64_t first, std::uint64_t count, const std::string& receivers,
                 const char* role = "send") {
  return startPeer({role, arena, std::to_string(first), std::to_string(count), receivers, kModel, kSeed,
                    std::to_string(kPeerDeadline.count())});
}

std::uint32_t bucketCount() {
  auto manifest = Manifest::create(*cli::modelTensors(kModel));
  return BucketPlan::build(*manifest, kGeometry.bucketBytes, kPlanAlignment)->bucketCount();
}

// A complete transfer, sender and every receiver in processes of their own; they must all agree.
void expectTransferThrough(const std::string& arena, std::uint64_t transfer, const std::vector<std::uint32_t>& ids) {
  std::vector<Peer> receivers;
  std::string list;
  for (std::uint32_t id : ids) {
    receivers.push_back(startReceiver(arena, transfer, 1, id));
    list += (list.empty() ? "" : ",") + std::to_string(id);
  }
  Peer sender = startSender(arena, transfer, 1, list);
  ASSERT_EQ(sender.process.wait(kExitTimeout), kPeerOk);
  const std::vector<Reported> sent = sender.reported();
  ASSERT_EQ(sent.size(), 1U);
  for (std::size_t r = 0; r < receivers.size(); ++r) {
    ASSERT_EQ(receivers[r].process.wait(kExitTimeout), kPeerOk) << "receiver " << ids[r];
    EXPECT_EQ(receivers[r].reported(), sent) << "receiver " << ids[r];
  }
}

void expectConsecutiveTransfers(const char* senderRole) {
  constexpr std::uint64_t kTransfers = 4;
  auto owner = ShmArena::create(arenaName(), kGeometry);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  ASSERT_GT(bucketCount(), 4 * kGeometry.bufferCount) << "the test must make buffers go round";

  // Receivers first, so that the sender finds some already waiting and others still starting.
  std::vector<Peer> receivers;
  for (std::uint32_t r = 0; r < 3; ++r) receivers.push_back(startReceiver(owner->name(), 1, kTransfers, r));
  Peer sender = startSender(owner->name(), 1, kTransfers, "0,1,2", senderRole);

  ASSERT_EQ(sender.process.wait(kExitTimeout), kPeerOk);
  const std::vector<Reported> sent = sender.reported();
  ASSERT_EQ(sent.size(), kTransfers);
  const std::uint64_t modelBytes = Manifest::create(*cli::modelTensors(kModel))->totalBytes();
  for (std::uint64_t t = 0; t < kTransfers; ++t) {
    EXPECT_EQ(sent[t].transfer, t + 1);
    EXPECT_EQ(sent[t].bytes, modelBytes);
    if (t > 0) {
      EXPECT_NE(sent[t].digest, sent[t - 1].digest) << "consecutive versions must differ";
    }
  }
  for (std::uint32_t r = 0; r < receivers.size(); ++r) {
    // Exit 0 also means the receiver found every byte equal to the content it expected.
    ASSERT_EQ(receivers[r].process.wait(kExitTimeout), kPeerOk) << "receiver " << r;
    EXPECT_EQ(receivers[r].reported(), sent) << "receiver " << r;
  }
}

TEST(ShmArenaProcesses, EveryReceiverProcessGetsEveryTransfer) { expectConsecutiveTransfers("send"); }

// A sender that starts the next transfer at once, without waiting for the receivers' reports: send() returns only
// once every receiver has drained its last bucket, so the next transfer's first buckets never replace unread ones.
TEST(ShmArenaProcesses, BackToBackTransfersWithoutABarrier) { expectConsecutiveTransfers("send-nowait"); }

// Receiver 2 dies after copying two buckets. The sender can go on only as far as the buffers the dead receiver
// drained, then waits for it; the owner's abort releases the sender and the live receivers at once (well before
// their own deadlines), and the next transfer, without the dead receiver, goes through.
TEST(ShmArenaProcesses, KilledReceiverCostsAnAbortNotAHang) {
  auto owner = ShmArena::create(arenaName(), kGeometry);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  ArenaProbe probe(owner->name());
  ASSERT_GT(bucketCount(), 6U);

  // Receiver 1 starts late, which holds the sender at bucket 2 while the victim has buckets 0 and 1.
  Peer first = startReceiver(owner->name(), 1, 1, 0);
  Peer victim = startReceiver(owner->name(), 1, 1, 2);
  Peer sender = startSender(owner->name(), 1, 1, "0,1,2");
  ASSERT_TRUE(eventually([&] {
    return probe.drained(1, 2) == ticketOf(1, 1) && probe.drained(1, 0) == ticketOf(1, 1);
  })) << "receivers 0 and 2 never copied buckets 0 and 1";
  EXPECT_EQ(probe.filled(0), ticketOf(1, 0)) << "the sender went on without receiver 1";

  victim.process.signal(SIGKILL);
  ASSERT_EQ(victim.process.wait(kExitTimeout), kKilled);
  Peer late = startReceiver(owner->name(), 1, 1, 1);
  // Buckets 2 and 3 go into the buffers the victim had drained; bucket 4 would need it to drain bucket 2.
  ASSERT_TRUE(eventually([&] {
    return probe.filled(1) == ticketOf(1, 3) && probe.drained(1, 0) == ticketOf(1, 3) &&
           probe.drained(1, 1) == ticketOf(1, 3);
  })) << "the sender and the live receivers never reached bucket 3";
  EXPECT_EQ(sender.process.wait(std::chrono::milliseconds{0}), std::nullopt) << "the sender did not wait";

  owner->abortTransfer(1);
  EXPECT_EQ(sender.process.wait(kExitTimeout), kPeerAborted);
  EXPECT_EQ(first.process.wait(kExitTimeout), kPeerAborted);
  EXPECT_EQ(late.process.wait(kExitTimeout), kPeerAborted);
  EXPECT_TRUE(sender.reported().empty());

  expectTransferThrough(owner->name(), 2, {0, 1});
}

// The sender dies with buckets 0 and 1 published and receiver 1 not started. Receiver 1, started afterwards with a
// short deadline, copies what is there and times out on bucket 2 by itself; receiver 0, whose deadline is far off,
// is released by the owner's abort. A new sender then moves the next transfer through the same arena.
TEST(ShmArenaProcesses, KilledSenderCostsATimeoutOrAnAbortNotAHang) {
  auto owner = ShmArena::create(arenaName(), kGeometry);
  ASSERT_TRUE(owner.has_value()) << owner.error().describe();
  ArenaProbe probe(owner->name());
  ASSERT_GT(bucketCount(), 2U);

  Peer waiting = startReceiver(owner->name(), 1, 1, 0);
  Peer sender = startSender(owner->name(), 1, 1, "0,1,2");
  ASSERT_TRUE(eventually([&] { return probe.filled(1) == ticketOf(1, 1) && probe.drained(1, 0) == ticketOf(1, 1); }))
      << "the sender never published bucket 1, or receiver 0 never copied it";

  sender.process.signal(SIGKILL);
  ASSERT_EQ(sender.process.wait(kExitTimeout), kKilled);

  Peer late = startReceiver(owner->name(), 1, 1, 1, kShortPeerDeadline);
  EXPECT_EQ(late.process.wait(kExitTimeout), kPeerTimedOut);
  EXPECT_EQ(probe.drained(1, 1), ticketOf(1, 1)) << "receiver 1 should have copied what the sender left";
  EXPECT_EQ(waiting.process.wait(std::chrono::milliseconds{0}), std::nullopt) << "receiver 0 did not wait";

  owner->abortTransfer(1);
  EXPECT_EQ(waiting.process.wait(kExitTimeout), kPeerAborted);
  EXPECT_TRUE(waiting.reported().empty());
  EXPECT_TRUE(late.reported().empty());

  expectTransferThrough(owner->name(), 2, {0, 2});
}

}  // namespace
}  // namespace wsync::bus
