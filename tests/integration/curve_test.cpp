// A tcp bus with CURVE (docs/security.md), with the real binaries: agents whose keys are on the coordinator's
// allowlist run rounds; a client with another key, or with none, never gets in, the coordinator logs the refusal
// and the client says why it was refused; a tcp bus without keys refuses to start unless told --insecure.
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "free_port.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"

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
                                   << publicKeys_["worker"] << "\n"
                                   << publicKeys_["monitor"] << "\n";
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
  std::vector<bus::DealerEndpoint> holders_;  // connections a test keeps open until it ends
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
  auto refusedCtl = ChildProcess::spawn(testBinary(WSYNC_CTL_BIN),
                                        [&] {
                                          std::vector<std::string> args{"--bus", bus_};
                                          for (auto& arg : clientArgs("stranger")) args.push_back(arg);
                                          args.emplace_back("status");
                                          return args;
                                        }(),
                                        {.stderrFile = path("ctl-stranger.log")});
  EXPECT_EQ(refusedCtl.wait(kPatience), 1);
  const std::string ctlLog = readTextFile(path("ctl-stranger.log"));
  EXPECT_NE(ctlLog.find("refused this client's CURVE key"), std::string::npos) << ctlLog;
  // And wsync-mon, which would otherwise report a bus without a coordinator.
  auto refusedMon = ChildProcess::spawn(testBinary(WSYNC_MON_BIN),
                                        [&] {
                                          std::vector<std::string> args{"--bus", bus_, "--once"};
                                          for (auto& arg : clientArgs("stranger")) args.push_back(arg);
                                          return args;
                                        }(),
                                        {.stderrFile = path("mon-stranger.log")});
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
  auto worker = ChildProcess::spawn(testBinary(WSYNC_WORKER_BIN),
                                    [&] {
                                      std::vector<std::string> args{"--bus", bus_, "--id", "w0"};
                                      for (auto& arg : clientArgs("worker")) args.push_back(arg);
                                      return args;
                                    }(),
                                    {.stderrFile = path("worker.log")});
  EXPECT_EQ(worker.wait(kPatience), 2);
  EXPECT_NE(readTextFile(path("worker.log")).find("other users can read it"), std::string::npos);

  std::ofstream(path("bad-allowlist")) << "secret " << publicKeys_["server"] << "\n";
  auto coordinator = ChildProcess::spawn(testBinary(WSYNC_COORDINATOR_BIN),
                                         {"--bus", bus_, "--transport", transport_, "--curve-keys", keyFile("server"),
                                          "--allow-keys", path("bad-allowlist")},
                                         {.stderrFile = path("coordinator.log")});
  EXPECT_EQ(coordinator.wait(kPatience), 2);
  EXPECT_NE(readTextFile(path("coordinator.log")).find("an allowlist holds public keys only"), std::string::npos);
}

// A registration is tied to the CURVE key it was admitted with: another allowed client that has the registration's
// secret (a leak, a copied file) still cannot take the agent's id over.
TEST_F(CurveTest, ARegistrationIsTiedToTheCurveKeyItWasAdmittedWith) {
  auto args = serverArgs();
  args.insert(args.end(), {"--heartbeat-timeout-ms", "120000"});  // the holder below sends no heartbeats
  startCoordinator(args, path("coordinator.log"));
  const auto endpoints = bus::resolveEndpoints(bus_, transport_);
  ASSERT_TRUE(endpoints);
  auto helloAs = [&](const std::string& keyName,
                     const std::vector<std::uint8_t>& secret) -> std::optional<bus::Message> {
    auto dealer =
        bus::DealerEndpoint::connect(context_, endpoints->requests, keyName,
                                     bus::CurveClient{*bus::readCurveKeyPair(keyFile(keyName)), publicKeys_["server"]});
    EXPECT_TRUE(dealer);
    if (!dealer) return std::nullopt;
    bus::MessageBuilder builder;
    auto& fbb = builder.fbb();
    const auto hello = msg::CreateAgentHello(fbb, fbb.CreateString("x"), msg::Role::Trainer, bus::kProtocolVersion, -1,
                                             1, 1, fbb.CreateString("h"), 0, 0, fbb.CreateString("key-of-" + keyName),
                                             0, secret.empty() ? 0 : fbb.CreateVector(secret));
    EXPECT_TRUE(dealer->send(builder.finish(hello, bus::EnvelopeStamp{0, 1})));
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      auto received = dealer->receive(std::chrono::milliseconds(100));
      if (received && *received && (*received)->message) {
        bus::Message& message = *(*received)->message;
        if (message.as<msg::Welcome>() != nullptr || message.as<msg::Error>() != nullptr) {
          holders_.push_back(std::move(*dealer));  // keeps the connection (and its registration) open
          return std::move(message);
        }
      }
    }
    return std::nullopt;
  };
  const auto welcome = helloAs("worker", {});
  ASSERT_TRUE(welcome);
  ASSERT_NE(welcome->as<msg::Welcome>(), nullptr);
  const auto* field = welcome->as<msg::Welcome>()->registration_secret();
  ASSERT_NE(field, nullptr);
  const std::vector<std::uint8_t> secret(field->begin(), field->end());

  // Another allowed key with the right secret: refused while the holder lives.
  const auto other = helloAs("trainer", secret);
  ASSERT_TRUE(other);
  ASSERT_NE(other->as<msg::Error>(), nullptr) << "another client's key took over 'x' with the holder's secret";
  EXPECT_EQ(other->as<msg::Error>()->code(), msg::ErrorCode::DuplicateAgent);
  // The holder's own key with the secret (its link broke and it came back): the registration is its own again.
  const auto back = helloAs("worker", secret);
  ASSERT_TRUE(back);
  EXPECT_NE(back->as<msg::Welcome>(), nullptr);
}

}  // namespace
}  // namespace wsync::test
