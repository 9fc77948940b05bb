// The host rig's network (tests/hosts/rig.sh): hosts reach each other over TCP by address and by name; a cut link
// makes a host unreachable (connections time out, nothing is refused) without resetting the connections it has, and
// once restored the same connections carry traffic again.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "captured_run.hpp"
#include "host_rig.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

using Clock = std::chrono::steady_clock;

// Any port: every host has a network stack of its own, so tests running at once cannot collide on it.
constexpr const char* kPort = "7000";
// A probe of a host that is reachable waits this long for the connection and the greeting; repeated until
// kPatience, since the server may still be starting on a loaded machine.
constexpr std::chrono::milliseconds kReachableProbe{5000};
// A probe of a cut host: long enough that a reachable one would have answered many times over, short enough to keep
// the test quick. tcp_peer's exit code when it timed out (not refused, not unreachable: nobody said anything).
constexpr std::chrono::milliseconds kCutProbe{2000};
constexpr int kProbeTimedOut = 3;
// How often a held connection sends a ping.
constexpr const char* kPingIntervalMs = "100";
// After the cut, echoes already on their way may still arrive for this long; after it, none may.
constexpr std::chrono::milliseconds kInFlightGrace{500};
// How long the cut lasts while the test watches that nothing gets through and nothing breaks.
constexpr std::chrono::seconds kCutWindow{3};

std::vector<std::string> probeArgs(const std::string& address, std::chrono::milliseconds timeout) {
  return {"probe", address, kPort, std::to_string(timeout.count())};
}

// Probes `address` from `host` until one gets the greeting (or kPatience passes); that run.
CapturedRun probeUntilReached(const HostRig& rig, const std::string& host, const std::string& address) {
  const auto deadline = Clock::now() + kPatience;
  for (;;) {
    CapturedRun run =
        runToEnd(rig.command(host, testBinary(WSYNC_TCP_PEER), probeArgs(address, kReachableProbe)), kPatience);
    if (run.status == 0 || Clock::now() >= deadline) return run;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::size_t echoes(const std::string& heldOutput) { return occurrences(heldOutput, "echo "); }

class RigNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto reason = HostRig::unavailableReason()) GTEST_SKIP() << *reason;
    auto made = HostRig::make({"alpha", "beta"});
    ASSERT_TRUE(made) << made.error();
    rig_.emplace(std::move(*made));
    directory_ = ::testing::TempDir() + "/" + rig_->name();
    std::filesystem::create_directories(directory_);
    server_.emplace(
        rig_->spawn("beta", testBinary(WSYNC_TCP_PEER), {"serve", kPort}, {.stderrFile = path("server.log")}));
  }
  void TearDown() override {
    server_.reset();
    rig_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  std::string path(const std::string& name) const { return directory_ + "/" + name; }

  std::optional<HostRig> rig_;
  std::string directory_;
  std::optional<cli::ChildProcess> server_;
};

TEST_F(RigNetworkTest, HostsReachEachOtherByAddressAndByName) {
  const CapturedRun reached = probeUntilReached(*rig_, "alpha", rig_->address("beta"));
  ASSERT_EQ(reached.status, 0) << reached.describe();
  EXPECT_EQ(reached.out, "beta\n");  // the greeting names the host that answered

  const CapturedRun named = runToEnd(rig_->command("alpha", "/usr/bin/getent", {"hosts", "beta"}), kPatience);
  ASSERT_EQ(named.status, 0) << named.describe();
  EXPECT_EQ(named.out.substr(0, named.out.find_first_of(" \t")), rig_->address("beta")) << named.out;
}

TEST_F(RigNetworkTest, ACutLinkDropsTrafficWithoutResettingConnectionsUntilItIsRestored) {
  const std::string beta = rig_->address("beta");
  ASSERT_EQ(probeUntilReached(*rig_, "alpha", beta).status, 0);

  // A connection from alpha to beta that pings every 100 ms; its output says what came back and how it ended.
  const std::string heldPath = path("held.out");
  const int heldFd = ::open(heldPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(heldFd, 0);
  auto held = rig_->spawn("alpha", testBinary(WSYNC_TCP_PEER), {"hold", beta, kPort, kPingIntervalMs},
                          {.stdoutFd = heldFd, .stderrFile = path("held.log")});
  ::close(heldFd);
  auto deadline = Clock::now() + kPatience;
  while (echoes(readTextFile(heldPath)) < 3) {
    ASSERT_LT(Clock::now(), deadline) << "no echoes on the held connection: " << readTextFile(heldPath);
    ASSERT_TRUE(held.running()) << readTextFile(heldPath);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  ASSERT_TRUE(rig_->setLink("beta", false));
  std::this_thread::sleep_for(kInFlightGrace);
  const std::size_t echoesAtCut = echoes(readTextFile(heldPath));
  // A new connection gets no answer at all: no refusal, no "unreachable" from anyone, it times out.
  const CapturedRun cut =
      runToEnd(rig_->command("alpha", testBinary(WSYNC_TCP_PEER), probeArgs(beta, kCutProbe)), kPatience);
  EXPECT_EQ(cut.status, kProbeTimedOut) << cut.describe();
  std::this_thread::sleep_for(kCutWindow - kCutProbe);
  // Nothing got through, and nothing was reset: the held connection is still open, still pinging.
  EXPECT_EQ(echoes(readTextFile(heldPath)), echoesAtCut) << readTextFile(heldPath);
  EXPECT_TRUE(held.running()) << readTextFile(heldPath);

  ASSERT_TRUE(rig_->setLink("beta", true));
  const CapturedRun restored = probeUntilReached(*rig_, "alpha", beta);
  EXPECT_EQ(restored.status, 0) << restored.describe();
  // The same connection carries traffic again (once TCP's backed-off retransmission fires).
  deadline = Clock::now() + kPatience;
  while (echoes(readTextFile(heldPath)) <= echoesAtCut + 3) {
    ASSERT_LT(Clock::now(), deadline) << "the held connection stayed silent after the link came back: "
                                      << readTextFile(heldPath);
    ASSERT_TRUE(held.running()) << readTextFile(heldPath);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(readTextFile(heldPath).find("ended"), std::string::npos) << readTextFile(heldPath);
}

}  // namespace
}  // namespace wsync::test
