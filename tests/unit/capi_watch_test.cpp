// Watching a bus through libwsync.so: the event stream shows every phase of a round as the JSON objects
// wsync-mon --json prints, and the status is the coordinator's snapshot as wsync-ctl status --json prints it.
#include <set>

#include <nlohmann/json.hpp>

#include "capi_fixture.hpp"

namespace wsync::capi_test {
namespace {

TEST_F(CApi, TheEventStreamShowsEveryPhaseOfARoundAsJson) {
  ASSERT_NO_FATAL_FAILURE(startCoordinator());
  wsync_connection connection{bus_.c_str(), nullptr, nullptr, nullptr};
  wsync_events* opened = nullptr;
  ASSERT_EQ(wsync_events_open(&connection, &opened), WSYNC_OK) << lastError();
  Events events(opened);
  // Live once the first event (the coordinator's beat) arrives.
  char* first = nullptr;
  ASSERT_EQ(wsync_events_next(events.get(), kGenerousMs, &first), WSYNC_OK) << lastError();
  Text(first).reset();

  Worker worker = startWorker(bus_, "worker", engine_);
  Trainer trainer = startTrainer(bus_);
  ASSERT_TRUE(worker && trainer);
  declare(trainer.get());
  ASSERT_EQ(publish(trainer.get(), model_, 1, sent_).kind, WSYNC_OUTCOME_COMMITTED);

  std::set<std::string> topics;
  nlohmann::json commit;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGenerousMs);
  while (!topics.contains("round/idle") && std::chrono::steady_clock::now() < deadline) {
    char* raw = nullptr;
    const wsync_status status = wsync_events_next(events.get(), 100, &raw);
    if (status == WSYNC_TIMEOUT) continue;
    ASSERT_EQ(status, WSYNC_OK) << lastError();
    const Text text(raw);
    const nlohmann::json event = nlohmann::json::parse(text.get());
    for (const char* key : {"topic", "seq", "epoch", "sent_at_ns", "type"}) ASSERT_TRUE(event.contains(key)) << key;
    topics.insert(event["topic"].get<std::string>());
    if (event["topic"] == "round/commit") commit = event;
  }
  for (const char* topic :
       {"agent/joined", "round/begin", "round/pause", "round/transfer", "round/commit", "round/resume", "round/idle"}) {
    EXPECT_TRUE(topics.contains(topic)) << topic << " not seen; seen: " << nlohmann::json(topics).dump();
  }
  ASSERT_FALSE(commit.is_null());
  EXPECT_EQ(commit["version"], 1);
  EXPECT_EQ(commit["bytes"], model_.totalBytes());
  EXPECT_EQ(commit["type"], "Commit");

  char* none = reinterpret_cast<char*>(1);
  EXPECT_EQ(wsync_events_next(events.get(), -5, &none), WSYNC_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
}

TEST_F(CApi, StatusIsTheCoordinatorsSnapshotAsJson) {
  wsync_connection connection{bus_.c_str(), nullptr, nullptr, nullptr};
  char* raw = nullptr;
  EXPECT_EQ(wsync_bus_status(&connection, 100, &raw), WSYNC_TIMEOUT);  // nobody runs the bus yet
  EXPECT_TRUE(contains(lastError(), "no coordinator answered")) << lastError();
  EXPECT_EQ(raw, nullptr);

  ASSERT_NO_FATAL_FAILURE(startBus());
  wsync_publish_options options;
  wsync_publish_options_init(&options);
  options.label = "first";
  sent_ = model_.content(1);
  auto tensors = model_.tensors(sent_);
  ASSERT_EQ(wsync_trainer_publish(trainer_.get(), 1, tensors.data(), tensors.size(), &options), WSYNC_OK);
  wsync_outcome outcome = emptyOutcome();
  ASSERT_EQ(wsync_trainer_wait(trainer_.get(), kGenerousMs, &outcome), WSYNC_OK);

  ASSERT_EQ(wsync_bus_status(&connection, kGenerousMs, &raw), WSYNC_OK) << lastError();
  const Text text(raw);
  const nlohmann::json status = nlohmann::json::parse(text.get());
  EXPECT_EQ(status["bus"], bus_);
  EXPECT_EQ(status["committed_version"], 1);
  EXPECT_EQ(status["committed_label"], "first");
  EXPECT_EQ(status["phase"], "idle");
  std::set<std::pair<std::string, std::string>> agents;
  for (const auto& agent : status["agents"]) agents.emplace(agent["agent_id"], agent["role"]);
  EXPECT_EQ(agents, (std::set<std::pair<std::string, std::string>>{{"trainer", "trainer"}, {"worker", "worker"}}));
}

}  // namespace
}  // namespace wsync::capi_test
