#pragma once
// Test support: one bus spread over the hosts of a rig (host_rig.hpp), as a multi-node run lays it out: the
// coordinator on "coord" serving tcp with CURVE, the trainer on "train", workers on hosts of their own, the
// operator's tools on "ops". Every program gets a key pair made on its host and admitted by the coordinator; their
// logs and dumps go to the test's folder (a shared filesystem, as on a cluster). The test process itself cannot
// reach the rig's network: it learns what happened from the programs' exit statuses, logs and dumps, and from
// wsync-ctl run on "ops".
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "captured_run.hpp"
#include "host_rig.hpp"
#include "wsync/cli/child_process.hpp"

namespace wsync::test {

class BusRigFixture : public ::testing::Test {
 protected:
  // The hosts of every bus rig; a test uses those it needs.
  static inline const std::vector<std::string> kHosts{"coord", "train", "w1", "w2", "ops"};

  void SetUp() override;
  void TearDown() override;

  // Starts the coordinator on "coord" (extra flags after the fixture's) and waits until it is ready.
  void startCoordinator(const std::vector<std::string>& extra = {});
  // wsync-worker `id` on `host`, its log in <id>.log and its weights dumped to <id>.safetensors at exit.
  cli::ChildProcess& startWorker(const std::string& id, const std::string& host,
                                 const std::vector<std::string>& extra = {});
  // wsync-trainer `id` on "train", likewise.
  cli::ChildProcess& startTrainer(const std::string& id, const std::vector<std::string>& extra = {});
  // wsync-ctl on "ops" (as the operator), to its end.
  CapturedRun ctl(const std::vector<std::string>& command);
  // `wsync-ctl status --json` on "ops", parsed (a test failure and null when it fails).
  nlohmann::json status();
  // Waits until `count` agents are registered (by status()).
  bool waitForAgents(std::size_t count);
  // The agent `id` in a status, or null.
  static nlohmann::json agentIn(const nlohmann::json& state, const std::string& id);

  std::string path(const std::string& name) const { return directory_ + "/" + name; }
  std::string log(const std::string& name) const;

  std::optional<HostRig> rig_;
  std::string bus_;
  std::string directory_;
  std::string transport_;
  std::optional<cli::ChildProcess> coordinator_;
  std::map<std::string, cli::ChildProcess> agents_;

 private:
  // The key pair of `name`, made on `host`; its public line.
  std::string makeKeys(const std::string& host, const std::string& name);
  std::vector<std::string> clientArgs(const std::string& keys) const;
};

}  // namespace wsync::test
