// Structured logs and the progress bar: every line carries the program, agent and version, in text or as JSON;
// levels filter; on a terminal the progress bar sits under the log lines and is erased when done, and where stderr
// is not a terminal nothing but log lines is written.
#include <fcntl.h>
#include <pty.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "wsync/bus/core/log.hpp"
#include "wsync/cli/progress_bar.hpp"

namespace wsync::log {
namespace {

using Clock = std::chrono::steady_clock;

// Points this process's stderr at `fd` for the test's duration (and wsync's logger at it, with `options`), then
// puts both back.
class StderrRedirect {
 public:
  StderrRedirect(int fd, const Options& options) : saved_(::dup(STDERR_FILENO)) {
    std::fflush(stderr);
    ::dup2(fd, STDERR_FILENO);
    configure(options);  // the sink looks at stderr (terminal or not) when it is made
  }
  ~StderrRedirect() {
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    configure(Options{});
    setAgent("");
    setVersion(0);
  }

 private:
  int saved_;
};

std::string readAll(int fd) {
  std::string text;
  char buffer[4096];
  while (true) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got > 0) {
      text.append(buffer, static_cast<std::size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    return text;  // end of file, or EAGAIN on a drained non-blocking pty
  }
}

std::string logToFile(const Options& options, const std::function<void()>& body) {
  char path[] = "/tmp/wsync-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  {
    StderrRedirect redirect(fd, options);
    body();
  }
  ::lseek(fd, 0, SEEK_SET);
  std::string text = readAll(fd);
  ::close(fd);
  ::unlink(path);
  return text;
}

TEST(Log, TextLinesCarryProgramAgentAndVersion) {
  const std::string text = logToFile({.program = "wsync-worker"}, [] {
    setAgent("worker-7");
    setVersion(12);
    info("version {} applied (round {})", 12, 40);
    setVersion(13);
    warn("round {} aborted", 41);
  });
  const std::regex line(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (info |warn ) wsync-worker agent=worker-7 )"
                        R"(version=(\d+) \| (.*)\n)");
  auto begin = std::sregex_iterator(text.begin(), text.end(), line);
  std::vector<std::smatch> lines(begin, std::sregex_iterator());
  ASSERT_EQ(lines.size(), 2U) << text;
  EXPECT_EQ(lines[0][2], "12");
  EXPECT_EQ(lines[0][3], "version 12 applied (round 40)");
  EXPECT_EQ(lines[1][1], "warn ");
  EXPECT_EQ(lines[1][2], "13");
}

TEST(Log, JsonLinesAreObjectsWithTheSameFields) {
  const std::string text = logToFile({.program = "wsync-trainer", .format = Format::Json}, [] {
    setAgent("trainer-0");
    setVersion(5);
    info("a \"quoted\" name\twith a tab");
    error("failed: {}", "disk full");
  });
  std::istringstream lines(text);
  std::vector<nlohmann::json> objects;
  for (std::string line; std::getline(lines, line);) objects.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(objects.size(), 2U) << text;
  EXPECT_EQ(objects[0]["program"], "wsync-trainer");
  EXPECT_EQ(objects[0]["agent"], "trainer-0");
  EXPECT_EQ(objects[0]["version"], 5);
  EXPECT_EQ(objects[0]["level"], "info");
  EXPECT_EQ(objects[0]["msg"], "a \"quoted\" name\twith a tab");
  EXPECT_EQ(objects[1]["level"], "error");
  EXPECT_EQ(objects[1]["msg"], "failed: disk full");
  EXPECT_TRUE(objects[1]["time"].get<std::string>().ends_with("Z"));
}

TEST(Log, LevelsFilter) {
  const std::string text = logToFile({.program = "p", .level = spdlog::level::warn}, [] {
    debug("not shown");
    info("not shown either");
    warn("shown");
  });
  EXPECT_EQ(text.find("not shown"), std::string::npos) << text;
  EXPECT_NE(text.find("| shown"), std::string::npos) << text;
}

TEST(Log, ParsesLevelsAndFormatsAndNamesBadOnes) {
  EXPECT_EQ(parseLevel("debug").value(), spdlog::level::debug);
  EXPECT_EQ(parseLevel("off").value(), spdlog::level::off);
  EXPECT_EQ(parseFormat("json").value(), Format::Json);
  ASSERT_FALSE(parseLevel("loud").has_value());
  EXPECT_NE(parseLevel("loud").error().find("unknown log level 'loud'"), std::string::npos);
  EXPECT_NE(parseFormat("xml").error().find("unknown log format 'xml'"), std::string::npos);
}

TEST(ProgressBar, RendersBytesPercentAndRate) {
  const std::string bar = cli::renderProgressBar("version 3", 1'210'000'000, 2'470'000'000, 4.83e9, 10);
  EXPECT_EQ(bar, "version 3  [####......]  48%  1.21 GB / 2.47 GB  4.83 GB/s");
  EXPECT_EQ(cli::renderProgressBar("v", 0, 0, 0, 4), "v  [####] 100%  0.00 B / 0.00 B  0.00 B/s");
}

TEST(ProgressBar, WritesNothingWhereStderrIsNotATerminal) {
  const std::string text = logToFile({.program = "p"}, [] {
    const auto start = Clock::now();
    cli::ProgressBar bar("version 1", start);
    EXPECT_FALSE(bar.update(10, 100, start + 2 * cli::kProgressBarDelay));
    info("a line");
  });
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(text.find("version 1"), std::string::npos) << text;
  EXPECT_NE(text.find("| a line\n"), std::string::npos) << text;
}

TEST(ProgressBar, OnATerminalSitsUnderTheLogLinesAndIsErased) {
  int master = -1;
  int slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  ::fcntl(master, F_SETFL, ::fcntl(master, F_GETFL) | O_NONBLOCK);
  {
    StderrRedirect redirect(slave, {.program = "p"});
    const auto start = Clock::now();
    cli::ProgressBar bar("version 9", start);
    EXPECT_FALSE(bar.update(1, 100, start + cli::kProgressBarDelay / 2)) << "too early: a short transfer stays quiet";
    EXPECT_TRUE(bar.update(50, 100, start + 2 * cli::kProgressBarDelay));
    EXPECT_FALSE(bar.update(60, 100, start + 2 * cli::kProgressBarDelay + cli::kProgressBarRedraw / 2));
    info("a line while the bar shows");
    bar.finish();
  }
  ::close(slave);
  const std::string screen = readAll(master);
  ::close(master);
  const std::string erase = "\r\x1b[K";
  const std::size_t drawn = screen.find(erase + "version 9  [");
  ASSERT_NE(drawn, std::string::npos) << screen;
  EXPECT_NE(screen.find("50%", drawn), std::string::npos) << screen;
  // The log line comes after the bar was erased, on a line of its own, and the bar is drawn again below it.
  const std::size_t line = screen.find("| a line while the bar shows", drawn);
  ASSERT_NE(line, std::string::npos) << screen;
  EXPECT_NE(screen.rfind(erase, line), drawn) << "the bar must be erased before the log line: " << screen;
  EXPECT_NE(screen.find("\nversion 9", line), std::string::npos) << screen;
  EXPECT_TRUE(screen.ends_with(erase)) << "finish() erases the bar: " << screen;
}

}  // namespace
}  // namespace wsync::log
