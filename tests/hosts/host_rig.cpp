#include "host_rig.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <gtest/gtest.h>

#include "captured_run.hpp"
#include "round_fixture.hpp"

namespace wsync::test {
namespace {

// rig.sh's commands take well under a second; a loaded 2-core machine running other tests can make it many.
constexpr std::chrono::seconds kRigCommandTimeout{60};
// rig.sh's exit code for "rigs cannot be made here" (its reason on stderr).
constexpr int kRigUnavailable = 77;
// bash, which runs rig.sh whatever its file mode after a copy.
constexpr const char* kShell = "/bin/bash";

// The script beside the test binaries (the build copies it there), moved with them by WSYNC_TEST_BIN_DIR.
std::string rigScript() { return testBinary(WSYNC_HOST_RIG); }

CapturedRun rig(const std::vector<std::string>& args) {
  std::vector<std::string> argv{kShell, rigScript()};
  argv.insert(argv.end(), args.begin(), args.end());
  return runToEnd(argv, kRigCommandTimeout);
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

std::optional<std::string> HostRig::unavailableReason() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    const CapturedRun check = rig({"check"});
    if (check.status == kRigUnavailable) return trimmed(check.err);
    // Any other failure is the rig's own bug, not this machine's: make() reports it and the test fails.
    return std::nullopt;
  }();
  return reason;
}

tl::expected<HostRig, std::string> HostRig::make(const std::vector<std::string>& hosts) {
  static std::atomic<int> counter{0};
  std::string name = "t" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  std::vector<std::string> args{"up", "--owner", std::to_string(::getpid()), name};
  args.insert(args.end(), hosts.begin(), hosts.end());
  const CapturedRun up = rig(args);
  if (up.status != 0) {
    rig({"down", name});
    return tl::unexpected("rig.sh up " + name + " " + up.describe());
  }
  const CapturedRun listed = rig({"hosts", name});
  std::map<std::string, std::string> addresses;
  std::istringstream lines(listed.out);
  for (std::string host, address; lines >> host >> address;) addresses[host] = address;
  if (listed.status != 0 || addresses.size() != hosts.size()) {
    rig({"down", name});
    return tl::unexpected("rig.sh hosts " + name + " " + listed.describe() + " (printed '" + listed.out + "')");
  }
  return HostRig(std::move(name), hosts, std::move(addresses));
}

HostRig::HostRig(HostRig&& other) noexcept
    : name_(std::exchange(other.name_, {})), hosts_(std::move(other.hosts_)), addresses_(std::move(other.addresses_)) {}

HostRig::~HostRig() {
  if (name_.empty()) return;
  const CapturedRun down = rig({"down", name_});
  if (down.status != 0) ADD_FAILURE() << "rig.sh down " << name_ << " " << down.describe();
}

std::vector<std::string> HostRig::command(const std::string& host, const std::string& program,
                                          const std::vector<std::string>& args) const {
  std::vector<std::string> argv{kShell, rigScript(), "exec", name_, host, "--", program};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

cli::ChildProcess HostRig::spawn(const std::string& host, const std::string& program,
                                 const std::vector<std::string>& args, cli::ChildOptions options) const {
  if (options.deathSignal == 0) options.deathSignal = SIGKILL;
  const auto argv = command(host, program, args);
  return cli::ChildProcess::spawn(argv.front(), {argv.begin() + 1, argv.end()}, options);
}

const std::string& HostRig::address(const std::string& host) const {
  const auto found = addresses_.find(host);
  if (found == addresses_.end()) throw std::invalid_argument("rig " + name_ + " has no host '" + host + "'");
  return found->second;
}

tl::expected<void, std::string> HostRig::setLink(const std::string& host, bool up) const {
  const CapturedRun link = rig({"link", name_, host, up ? "up" : "down"});
  if (link.status != 0) {
    return tl::unexpected("rig.sh link " + name_ + " " + host + (up ? " up " : " down ") + link.describe());
  }
  return {};
}

}  // namespace wsync::test
