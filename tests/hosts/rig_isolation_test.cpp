// The host rig (tests/hosts/rig.sh): each host has its own hostname, its own /dev/shm (a tmpfs of its own, shared
// by every program on that host and by no other host, the real one included) and its own runtime folder.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "captured_run.hpp"
#include "host_rig.hpp"
#include "round_fixture.hpp"

namespace wsync::test {
namespace {

// What a host says about itself: its hostname, the device of its /dev/shm, its runtime folder and that folder's mode.
constexpr const char* kDescribeHost =
    "cat /proc/sys/kernel/hostname; stat -c %d /dev/shm; echo \"$WSYNC_RUNTIME_DIR\"; stat -c %a "
    "\"$WSYNC_RUNTIME_DIR\"";

struct HostView {
  std::string hostname;
  std::string shmDevice;
  std::string runtimeFolder;
  std::string runtimeMode;
};

HostView describe(const HostRig& rig, const std::string& host) {
  const CapturedRun run = runToEnd(rig.command(host, "/bin/sh", {"-c", kDescribeHost}), kPatience);
  EXPECT_EQ(run.status, 0) << run.describe();
  HostView view;
  std::istringstream lines(run.out);
  std::getline(lines, view.hostname);
  std::getline(lines, view.shmDevice);
  std::getline(lines, view.runtimeFolder);
  std::getline(lines, view.runtimeMode);
  return view;
}

// Runs `script` with sh on `host`; its exit status.
int shellOn(const HostRig& rig, const std::string& host, const std::string& script) {
  const CapturedRun run = runToEnd(rig.command(host, "/bin/sh", {"-c", script}), kPatience);
  EXPECT_NE(run.status, CapturedRun::kTimedOut) << script;
  return run.status;
}

TEST(RigIsolationTest, EachHostHasItsOwnNameSharedMemoryAndRuntimeFolder) {
  if (const auto reason = HostRig::unavailableReason()) GTEST_SKIP() << *reason;
  char realHostname[256] = {};
  ASSERT_EQ(::gethostname(realHostname, sizeof realHostname - 1), 0);
  struct stat realShm {};
  ASSERT_EQ(::stat("/dev/shm", &realShm), 0);

  auto rig = HostRig::make({"alpha", "beta"});
  ASSERT_TRUE(rig) << rig.error();
  const HostView alpha = describe(*rig, "alpha");
  const HostView beta = describe(*rig, "beta");
  EXPECT_EQ(alpha.hostname, "alpha");
  EXPECT_EQ(beta.hostname, "beta");
  // Different tmpfs mounts, not folders of one: another host's segments are not there to be opened at all.
  EXPECT_NE(alpha.shmDevice, beta.shmDevice);
  EXPECT_NE(alpha.shmDevice, std::to_string(realShm.st_dev));
  EXPECT_NE(beta.shmDevice, std::to_string(realShm.st_dev));
  EXPECT_NE(alpha.runtimeFolder, beta.runtimeFolder);
  EXPECT_FALSE(alpha.runtimeFolder.empty());
  EXPECT_EQ(alpha.runtimeMode, "700");
  EXPECT_EQ(beta.runtimeMode, "700");

  // A segment made on alpha is there for alpha's next program, and nowhere else.
  const std::string segment = "wsync-rig-test-" + rig->name();
  ASSERT_EQ(shellOn(*rig, "alpha", "echo from-alpha > /dev/shm/" + segment), 0);
  EXPECT_EQ(shellOn(*rig, "alpha", "grep -q from-alpha /dev/shm/" + segment), 0);
  EXPECT_EQ(shellOn(*rig, "beta", "test -e /dev/shm/" + segment), 1);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + segment));
  // And the real host's segments are not on the rig's hosts.
  const std::string realSegment = "/dev/shm/wsync-rig-test-real-" + rig->name();
  std::ofstream(realSegment) << "from the real host\n";
  EXPECT_EQ(shellOn(*rig, "alpha", "test -e " + realSegment), 1);
  std::filesystem::remove(realSegment);

  // The hosts' names are their own: the machine's is untouched.
  char hostnameAfter[256] = {};
  ASSERT_EQ(::gethostname(hostnameAfter, sizeof hostnameAfter - 1), 0);
  EXPECT_STREQ(hostnameAfter, realHostname);
}

}  // namespace
}  // namespace wsync::test
