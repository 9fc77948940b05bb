// A real Prometheus server (Debian's prometheus) scrapes `wsync-mon --prometheus` while a bus runs rounds; the
// values it stored, read back through its query API, must be the bus's: the committed version, the rounds
// committed, the worker's applied version and the round-duration histogram's count.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "free_port.hpp"
#include "round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

// Scrapes this often, so that the test waits a fraction of a second for each new sample.
constexpr const char* kScrapeInterval = "200ms";

class PrometheusScrape : public RoundFixture {
 protected:
  // The value Prometheus holds for `query` (an instant vector of one sample), or nothing yet.
  std::optional<std::string> query(httplib::Client& client, const std::string& expression) {
    const auto response = client.Get("/api/v1/query", httplib::Params{{"query", expression}}, httplib::Headers{});
    if (!response || response->status != 200) return std::nullopt;
    const auto body = nlohmann::json::parse(response->body, nullptr, false);
    if (body.is_discarded() || body.value("status", "") != "success") return std::nullopt;
    const auto& result = body["data"]["result"];
    if (!result.is_array() || result.size() != 1) return std::nullopt;
    return result[0]["value"][1].get<std::string>();
  }
};

TEST_F(PrometheusScrape, APrometheusServerStoresTheBusMetrics) {
  ASSERT_TRUE(std::filesystem::exists(WSYNC_PROMETHEUS_BIN))
      << WSYNC_PROMETHEUS_BIN << " is missing: tools/install-deps.sh installs Debian's prometheus";
  startCoordinator();
  auto worker = startWorker("w0");
  waitForAgents(1);
  auto monitor =
      ChildProcess::spawn("/bin/sh", {"-c", "exec '" + testBinary(WSYNC_MON_BIN) + "' --bus " + bus_ +
                                                " --prometheus 127.0.0.1:0 > /dev/null 2> '" + path("mon.err") + "'"});
  std::smatch match;
  const std::regex listening(R"(metrics on http://127\.0\.0\.1:([0-9]+)/metrics)");
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  std::string err;
  while (!std::regex_search(err = readTextFile(path("mon.err")), match, listening)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << err;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string target = "127.0.0.1:" + match[1].str();
  // The monitor serves before it follows the bus: it asks for a snapshot (which lists w0) only once an event has
  // proved its subscription live. A round begun before that would be seen without its start (and its duration).
  httplib::Client monitorClient("127.0.0.1", std::stoi(match[1].str()));
  const std::string w0AtZero = "wsync_agent_applied_version{bus=\"" + bus_ + "\",agent=\"w0\",role=\"Worker\"} 0\n";
  std::string metrics;
  while (metrics.find(w0AtZero) == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the monitor never showed w0:\n" << metrics;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto response = monitorClient.Get("/metrics");
    metrics = response ? response->body : std::string();
  }

  std::ofstream(path("prometheus.yml")) << "global:\n  scrape_interval: " << kScrapeInterval
                                        << "\nscrape_configs:\n  - job_name: wsync\n    static_configs:\n"
                                        << "      - targets: ['" << target << "']\n";
  const int port = freePort();
  ASSERT_GT(port, 0);
  auto prometheus = ChildProcess::spawn(
      "/bin/sh", {"-c", "exec '" WSYNC_PROMETHEUS_BIN "' --config.file='" + path("prometheus.yml") +
                            "' --storage.tsdb.path='" + path("tsdb") + "' --web.listen-address=127.0.0.1:" +
                            std::to_string(port) + " > '" + path("prometheus.log") + "' 2>&1"});

  auto trainer = startTrainer("t0", {"--steps", "3"});
  for (int round = 0; round < 3; ++round) ASSERT_TRUE(nextOutcome().committed);
  EXPECT_EQ(trainer.wait(kPatience), 0);

  httplib::Client client("127.0.0.1", port);
  const std::string bus = "bus=\"" + bus_ + "\"";
  const std::vector<std::pair<std::string, std::string>> expected{
      {"wsync_committed_version{" + bus + "}", "3"},
      {"wsync_rounds_total{" + bus + ",outcome=\"committed\"}", "3"},
      {"wsync_rounds_total{" + bus + ",outcome=\"aborted\"}", "0"},
      {"wsync_agent_applied_version{" + bus + ",agent=\"w0\"}", "3"},
      {"wsync_round_duration_seconds_count{" + bus + "}", "3"},
      {"wsync_coordinator_up{" + bus + "}", "1"}};
  deadline = std::chrono::steady_clock::now() + kPatience;
  std::map<std::string, std::string> stored;
  while (std::chrono::steady_clock::now() < deadline) {
    stored.clear();
    for (const auto& [expression, value] : expected) {
      if (auto held = query(client, expression)) stored[expression] = *held;
    }
    bool all = true;
    for (const auto& [expression, value] : expected) all = all && stored[expression] == value;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (const auto& [expression, value] : expected) {
    EXPECT_EQ(stored[expression], value) << expression << " as Prometheus stored it (log: "
                                         << readTextFile(path("prometheus.log")).substr(0, 2000) << ")";
  }
  prometheus.signal(SIGTERM);
  EXPECT_EQ(prometheus.wait(kPatience), 0);
  monitor.signal(SIGTERM);
  EXPECT_EQ(monitor.wait(kPatience), 0);
}

}  // namespace
}  // namespace wsync::test
