#include "stuck_process.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "text_file.hpp"

namespace wsync::test {
namespace {

// gdb gets this long to attach and walk the stacks; a wedged gdb must not become a second hang.
constexpr int kGdbSeconds = 30;
// Enough for a dozen threads' stacks under the sanitizers' deep frames, not the whole of CI's output.
constexpr std::size_t kMaxReport = 24 * 1024;

std::string run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), &::pclose);
  if (!pipe) return {};
  std::string output;
  char chunk[4096];
  while (const std::size_t got = std::fread(chunk, 1, sizeof chunk, pipe.get())) output.append(chunk, got);
  return output;
}

std::string fromProc(pid_t pid) {
  std::string report;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    auto field = [&](const char* name) {
      std::string text = readTextFile((task.path() / name).string());
      while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
      return text;
    };
    report += "  thread " + task.path().filename().string() + " (" + field("comm") + "): wchan " + field("wchan") +
              ", syscall " + field("syscall") + "\n";
  }
  return report.empty() ? "  (no /proc entry: the process is gone)\n" : report;
}

}  // namespace

std::string describeStuckProcess(pid_t pid) {
  std::string report = "process " + std::to_string(pid) + " is still running:\n";
  if (!run("command -v gdb").empty()) {
    std::string stacks = run("timeout " + std::to_string(kGdbSeconds) + " gdb -batch -nx -p " + std::to_string(pid) +
                             " -ex 'thread apply all bt' 2>&1");
    if (stacks.size() > kMaxReport) stacks = "[...]\n" + stacks.substr(stacks.size() - kMaxReport);
    if (stacks.find("Thread ") != std::string::npos) return report + stacks;
  }
  return report + fromProc(pid);
}

}  // namespace wsync::test
