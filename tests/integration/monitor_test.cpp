// wsync-mon against a real running bus (coordinator, trainer and workers as processes): a monitor that joins late
// shows the committed version and every worker from the coordinator's snapshot; --json prints every event as one
// JSON object per line; --prometheus serves the round counts and versions on /metrics; without a coordinator it
// says so and exits 3.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

class MonitorTest : public RoundFixture {
 protected:
  // wsync-mon with its stdout and stderr in files (through a shell, which execs it).
  ChildProcess startMonitor(const std::vector<std::string>& args, const std::string& name) {
    std::string command = "exec '" + testBinary(WSYNC_MON_BIN) + "' --bus " + bus_;
    for (const auto& arg : args) command += " '" + arg + "'";
    command += " > '" + path(name + ".out") + "' 2> '" + path(name + ".err") + "'";
    return ChildProcess::spawn("/bin/sh", {"-c", command});
  }
  // Runs `wsync-mon --once` until its view satisfies `holds` (the coordinator learns applied versions from
  // heartbeats, so the first view after a round may lag by one).
  std::string viewWhere(const std::function<bool(const std::string&)>& holds) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    std::string view;
    while (std::chrono::steady_clock::now() < deadline) {
      auto monitor = startMonitor({"--once"}, "once");
      EXPECT_EQ(monitor.wait(kPatience), 0);
      view = readTextFile(path("once.out"));
      if (holds(view)) return view;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the view never showed what was expected; last one:\n" << view;
    return view;
  }
};

TEST_F(MonitorTest, ALateMonitorShowsTheBusFromTheSnapshot) {
  startCoordinator();
  auto w0 = startWorker("w0");
  auto w1 = startWorker("w1");
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "3"});
  for (int round = 0; round < 3; ++round) ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);
  // agent, role, rank, slot, state, applied version, heartbeat age, bytes of the round in progress.
  const std::regex worker(R"(\n(w[01]) +worker +[01] +[0-9]+ +idle +3 +[0-9]+ ms +-)");
  const std::string view = viewWhere([&](const std::string& text) {
    return std::distance(std::sregex_iterator(text.begin(), text.end(), worker), std::sregex_iterator()) == 2;
  });
  EXPECT_NE(view.find("committed version 3 (step-2)"), std::string::npos) << view;
  EXPECT_NE(view.find("no round in progress"), std::string::npos) << view;
}

TEST_F(MonitorTest, JsonModePrintsEveryEventAsOneObjectPerLine) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto monitor = startMonitor({"--json"}, "json");
  // The monitor is live once it printed an event (the coordinator beats every 100 ms here).
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (readTextFile(path("json.out")).find('\n') == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << readTextFile(path("json.err"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto trainer = startTrainer("t0", {"--steps", "2"});
  ASSERT_TRUE(nextOutcome().committed);
  ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the last events on their way to the monitor
  monitor.signal(SIGTERM);
  EXPECT_EQ(monitor.wait(kPatience), 0);

  std::istringstream lines(readTextFile(path("json.out")));
  std::vector<std::uint64_t> committed;
  std::vector<std::string> roundTopics;
  std::uint64_t lastRoundSeq = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto event = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(event.is_discarded()) << "not JSON: " << line;
    ASSERT_TRUE(event.contains("topic") && event.contains("seq") && event.contains("type")) << line;
    const std::string topic = event["topic"];
    if (topic.rfind("round/", 0) != 0) continue;
    roundTopics.push_back(topic);
    EXPECT_EQ(event["seq"].get<std::uint64_t>(), lastRoundSeq + 1) << "round events are numbered without a gap";
    lastRoundSeq = event["seq"];
    if (topic == "round/commit") committed.push_back(event["version"]);
  }
  EXPECT_EQ(committed, (std::vector<std::uint64_t>{1, 2}));
  const std::vector<std::string> oneRound{"round/begin",  "round/pause",  "round/transfer", "round/verify",
                                          "round/commit", "round/resume", "round/idle"};
  ASSERT_EQ(roundTopics.size(), 2 * oneRound.size());
  EXPECT_TRUE(std::equal(oneRound.begin(), oneRound.end(), roundTopics.begin()));
}

TEST_F(MonitorTest, PrometheusEndpointServesTheBusMetrics) {
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto monitor = startMonitor({"--prometheus", "127.0.0.1:0"}, "prom");
  std::smatch port;
  const std::regex listening(R"(metrics on http://127\.0\.0\.1:([0-9]+)/metrics)");
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  std::string err;
  while (!std::regex_search(err = readTextFile(path("prom.err")), port, listening)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << err;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  httplib::Client client("127.0.0.1", std::stoi(port[1]));
  std::string metrics;
  // The monitor serves before it follows the bus: it asks for a snapshot (which lists w0) only once an event has
  // proved its subscription live. A round begun before that would be seen without its start (and its duration).
  const std::string w0AtZero = "wsync_agent_applied_version{bus=\"" + bus_ + "\",agent=\"w0\",role=\"Worker\"} 0\n";
  while (metrics.find(w0AtZero) == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the monitor never showed w0:\n" << metrics;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto response = client.Get("/metrics");
    metrics = response ? response->body : std::string();
  }
  auto trainer = startTrainer("t0", {"--steps", "3"});
  for (int round = 0; round < 3; ++round) ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);

  deadline = std::chrono::steady_clock::now() + kPatience;
  // Each line comes from a different event (a round's duration from its end, after the commit): wait for all.
  const std::vector<std::string> expected{
      "wsync_rounds_total{bus=\"" + bus_ + "\",outcome=\"committed\"} 3\n",
      "wsync_agent_applied_version{bus=\"" + bus_ + "\",agent=\"w0\",role=\"Worker\"} 3\n",
      "wsync_committed_version{bus=\"" + bus_ + "\"} 3\n",
      "wsync_round_duration_seconds_count{bus=\"" + bus_ + "\"} 3\n",
      "wsync_agent_staleness_versions{bus=\"" + bus_ + "\",agent=\"w0\"} 0\n",
      "# TYPE wsync_round_duration_seconds histogram"};
  auto allThere = [&] {
    return std::all_of(expected.begin(), expected.end(),
                       [&](const std::string& line) { return metrics.find(line) != std::string::npos; });
  };
  while (std::chrono::steady_clock::now() < deadline) {
    const auto response = client.Get("/metrics");
    metrics = response ? response->body : std::string();
    if (allThere()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const auto& line : expected) EXPECT_NE(metrics.find(line), std::string::npos) << line << " in:\n" << metrics;
  monitor.signal(SIGTERM);
  EXPECT_EQ(monitor.wait(kPatience), 0);
}

TEST_F(MonitorTest, WithoutACoordinatorItSaysSoAndExits3) {
  auto monitor = startMonitor({"--once", "--wait-ms", "300"}, "none");
  EXPECT_EQ(monitor.wait(kPatience), 3);
  EXPECT_NE(readTextFile(path("none.err")).find("no coordinator on bus '" + bus_ + "'"), std::string::npos);
}

}  // namespace
}  // namespace wsync::test
