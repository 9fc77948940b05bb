// The real binaries' logs: every line names the program, the agent and the version it holds, in text or JSON,
// levels filter, and a bad flag is refused naming it.
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "round_fixture.hpp"
#include "text_file.hpp"

namespace wsync::test {
namespace {

class LoggingTest : public RoundFixture {};

TEST_F(LoggingTest, AgentsLogTheirIdAndVersionOnEveryLine) {
  startCoordinator();
  auto worker = startWorker("w0", {"--log-level", "info"}, path("w0.log"));
  auto quiet = startWorker("w1", {"--log-level", "warn"}, path("w1.log"));
  waitForAgents(2);
  auto trainer = startTrainer("t0", {"--steps", "2", "--log-format", "json"}, path("t0.log"));
  ASSERT_TRUE(nextOutcome().committed);
  ASSERT_TRUE(nextOutcome().committed);
  ASSERT_EQ(trainer.wait(kPatience), 0);
  ASSERT_TRUE(waitForApplied("w0", 2));
  worker.signal(SIGTERM);
  quiet.signal(SIGTERM);
  ASSERT_EQ(worker.wait(kPatience), 0);
  ASSERT_EQ(quiet.wait(kPatience), 0);

  // Text: time, level, program, agent, the version held when the line was written, message.
  const std::string text = readTextFile(path("w0.log"));
  const std::regex line(
      R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [a-z ]{5} wsync-worker agent=w0 version=\d+ \| .+$)");
  std::istringstream lines(text);
  int count = 0;
  for (std::string each; std::getline(lines, each); ++count) EXPECT_TRUE(std::regex_match(each, line)) << each;
  EXPECT_GE(count, 4) << text;  // joined, two versions applied, stopped
  EXPECT_NE(text.find("agent=w0 version=2 | version 2 applied (round 2)"), std::string::npos) << text;
  EXPECT_NE(text.find("agent=w0 version=2 | stopped at version 2"), std::string::npos) << text;

  // --log-level warn: a clean run has nothing to say.
  EXPECT_EQ(readTextFile(path("w1.log")), "");

  // JSON: one object per line, with the same fields.
  std::istringstream jsonLines(readTextFile(path("t0.log")));
  std::vector<nlohmann::json> objects;
  for (std::string each; std::getline(jsonLines, each);) {
    ASSERT_NO_THROW(objects.push_back(nlohmann::json::parse(each))) << each;
  }
  ASSERT_GE(objects.size(), 3U);
  bool sawCommit = false;
  for (const auto& object : objects) {
    EXPECT_EQ(object["program"], "wsync-trainer") << object;
    EXPECT_EQ(object["agent"], "t0") << object;
    const std::string message = object["msg"];
    if (message.starts_with("version 2 committed")) {
      sawCommit = true;
      EXPECT_EQ(object["version"], 2) << object;
      EXPECT_EQ(object["level"], "info") << object;
    }
  }
  EXPECT_TRUE(sawCommit) << readTextFile(path("t0.log"));
}

TEST_F(LoggingTest, BadLogFlagsAreRefusedByName) {
  auto worker = ChildProcess::spawn(testBinary(WSYNC_WORKER_BIN), {"--bus", bus_, "--log-level", "loud"},
                                    {.stderrFile = path("bad.log")});
  EXPECT_EQ(worker.wait(kPatience), 2);
  const std::string error = readTextFile(path("bad.log"));
  EXPECT_NE(error.find("--log-level"), std::string::npos) << error;
  EXPECT_NE(error.find("loud"), std::string::npos) << error;
  auto trainer = ChildProcess::spawn(testBinary(WSYNC_TRAINER_BIN), {"--bus", bus_, "--log-format", "xml"},
                                     {.stderrFile = path("bad-trainer.log")});
  EXPECT_NE(trainer.wait(kPatience), 0);
  EXPECT_NE(readTextFile(path("bad-trainer.log")).find("--log-format"), std::string::npos);
}

}  // namespace
}  // namespace wsync::test
