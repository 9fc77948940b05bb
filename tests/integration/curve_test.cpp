// A tcp bus with CURVE (docs/security.md), with the real binaries: agents whose keys are on the coordinator's
// allowlist run rounds; a client with another key, or with none, never gets in, the coordinator logs the refusal
// and the client says why it was refused; a tcp bus without keys refuses to start unless told --insecure.
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "free_port.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/transport/curve.hpp"

namespace wsync::test {
namespace {

// How long a refused client is given to get in anyway before the test concludes it cannot.
constexpr std::chrono::seconds kRefusalWindow{3};

class CurveTest : public RoundFixture {
 protected:
  void SetUp() override {
    RoundFixture::SetUp();
    const int port = freePortPair();
    ASSERT_GT(port, 0);
    transport_ = "tcp://127.0.0.1:" + std::to_string(port);
    for (const char* name : {"server", "trainer", "worker", "monitor", "stranger"}) {
      auto keys = bus::generateCurveKeyPair();
      ASSERT_TRUE(keys) << keys.error();
      ASSERT_TRUE(bus::writeCurveKeyPair(keyFile(name), *keys));
      publicKeys_[name] = keys->publicKey;
    }
    std::ofstream(path("server.pub")) << "public " << publicKeys_["server"] << "\n";
    std::ofstream(path("allowed")) << "# the bus's clients\npublic " << publicKeys_["trainer"] << "\n"
                                   << publicKeys_["worker"] << "\n" << publicKeys_["monitor"] << "\n";
    curve_ = bus::CurveClient{*bus::readCurveKeyPair(keyFile("monitor")), publicKeys_["server"]};
  }

  std::string keyFile(const std::string& name) const { return path(name + ".keys"); }
  std::vector<std::string> clientArgs(const std::string& name) const {
    return {"--transport", transport_, "--curve-keys", keyFile(name), "--server-key", path("server.pub")};
  }
  std::vector<std::string> serverArgs() const {
    return {"--transport", transport_, "--curve-keys", keyFile("server"), "--allow-keys", path("allowed")};
  }

  std::map<std::string, std::string> publicKeys_;
};

TEST_F(CurveTest, AllowedAgentsRunRoundsAndOthersAreRefusedAndLogged) {
  startCoordinator(serverArgs(), path("coordinator.log"));
  auto worker = startWorker("w0", clientArgs("worker"));
  waitForAgents(1);
  auto trainer = startTrainer("t0", [&] {
    auto args = clientArgs("trainer");
    args.insert(args.end(), {"--steps", "2"});
    return args;
  }());
  ASSERT_TRUE(nextOutcome().committed);
  ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);
  EXPECT_TRUE(waitForApplied("w0", 2));

  // A key pair the coordinator does not know, and a client without CURVE: neither ever registers, and each says
  // why and exits at once (not after its registration timeout, with "no Welcome").
  auto stranger = startWorker("stranger", clientArgs("stranger"), path("stranger.log"));
  auto plain = startWorker("plain", {"--transport", transport_}, path("plain.log"));
  std::this_thread::sleep_for(kRefusalWindow);
  EXPECT_EQ(block_->activeAgents(), 1U);
  EXPECT_FALSE(appliedVersion("stranger").has_value());
  EXPECT_FALSE(appliedVersion("plain").has_value());
  const std::string log = readTextFile(path("coordinator.log"));
  EXPECT_NE(log.find("CURVE key " + publicKeys_["stranger"] + " is not on the allowlist"), std::string::npos) << log;
  EXPECT_EQ(stranger.wait(kPatience), 1);
  const std::string strangerLog = readTextFile(path("stranger.log"));
  EXPECT_NE(strangerLog.find("refused this client's CURVE key"), std::string::npos) << strangerLog;
  EXPECT_EQ(plain.wait(kPatience), 1);
  const std::string plainLog = readTextFile(path("plain.log"));
  EXPECT_NE(plainLog.find("disagree on CURVE"), std::string::npos) << plainLog;

  // wsync-ctl with a key the coordinator does not know says so too.
  auto refusedCtl = ChildProcess::spawn(testBinary(WSYNC_CTL_BIN), [&] {
    std::vector<std::string> args{"--bus", bus_};
    for (auto& arg : clientArgs("stranger")) args.push_back(arg);
    args.emplace_back("status");
    return args;
  }(), {.stderrFile = path("ctl-stranger.log")});
  EXPECT_EQ(refusedCtl.wait(kPatience), 1);
  const std::string ctlLog = readTextFile(path("ctl-stranger.log"));
  EXPECT_NE(ctlLog.find("refused this client's CURVE key"), std::string::npos) << ctlLog;
  // And wsync-mon, which would otherwise report a bus without a coordinator.
  auto refusedMon = ChildProcess::spawn(testBinary(WSYNC_MON_BIN), [&] {
    std::vector<std::string> args{"--bus", bus_, "--once"};
    for (auto& arg : clientArgs("stranger")) args.push_back(arg);
    return args;
  }(), {.stderrFile = path("mon-stranger.log")});
  EXPECT_EQ(refusedMon.wait(kPatience), 1);
  const std::string monLog = readTextFile(path("mon-stranger.log"));
  EXPECT_NE(monLog.find("refused this client's CURVE key"), std::string::npos) << monLog;

  // wsync-ctl with an allowed key reads the bus; the allowed worker is still there.
  auto ctl = ChildProcess::spawn(testBinary(WSYNC_CTL_BIN), [&] {
    std::vector<std::string> args{"--bus", bus_};
    for (auto& arg : clientArgs("monitor")) args.push_back(arg);
    args.emplace_back("status");
    return args;
  }());
  EXPECT_EQ(ctl.wait(kPatience), 0);
}

TEST_F(CurveTest, ATcpBusWithoutKeysStartsOnlyWhenToldInsecure) {
  auto refused = ChildProcess::spawn(testBinary(WSYNC_COORDINATOR_BIN), {"--bus", bus_, "--transport", transport_},
                                     {.stderrFile = path("refused.log")});
  EXPECT_EQ(refused.wait(kPatience), 1);
  const std::string why = readTextFile(path("refused.log"));
  EXPECT_NE(why.find("--curve-keys"), std::string::npos) << why;
  EXPECT_NE(why.find("--insecure"), std::string::npos) << why;

  curve_.reset();
  startCoordinator({"--transport", transport_, "--insecure"});
  auto worker = startWorker("w0", {"--transport", transport_});
  waitForAgents(1);
  auto trainer = startTrainer("t0", {"--transport", transport_, "--steps", "1"});
  EXPECT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);
}

TEST_F(CurveTest, KeyFilesAreCheckedBeforeAnythingStarts) {
  // Another user could read this secret: refused by name, by every program that reads it.
  std::filesystem::permissions(keyFile("worker"), std::filesystem::perms::group_read,
                               std::filesystem::perm_options::add);
  auto worker = ChildProcess::spawn(testBinary(WSYNC_WORKER_BIN), [&] {
    std::vector<std::string> args{"--bus", bus_, "--id", "w0"};
    for (auto& arg : clientArgs("worker")) args.push_back(arg);
    return args;
  }(), {.stderrFile = path("worker.log")});
  EXPECT_EQ(worker.wait(kPatience), 2);
  EXPECT_NE(readTextFile(path("worker.log")).find("other users can read it"), std::string::npos);

  std::ofstream(path("bad-allowlist")) << "secret " << publicKeys_["server"] << "\n";
  auto coordinator = ChildProcess::spawn(
      testBinary(WSYNC_COORDINATOR_BIN),
      {"--bus", bus_, "--transport", transport_, "--curve-keys", keyFile("server"), "--allow-keys",
       path("bad-allowlist")},
      {.stderrFile = path("coordinator.log")});
  EXPECT_EQ(coordinator.wait(kPatience), 2);
  EXPECT_NE(readTextFile(path("coordinator.log")).find("an allowlist holds public keys only"), std::string::npos);
}

}  // namespace
}  // namespace wsync::test
