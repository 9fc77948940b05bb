// Bus names, the per-user runtime folder and endpoint resolution.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>

#include "scoped_env.hpp"
#include "test_environment.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::bus {
namespace {

using test::ScopedEnv;

// A path that does not exist yet under this process's private runtime folder (unique across --gtest_repeat).
std::string freshFolderName(const std::string& leaf) {
  return (std::filesystem::path(std::getenv("WSYNC_RUNTIME_DIR")) / test::uniqueBusName(leaf)).string();
}

TEST(BusAddress, AcceptsPlainNames) {
  for (const char* name : {"a", "policy-bus", "run_42.v2", "ABC-def_0.9"}) {
    EXPECT_TRUE(validateBusName(name).has_value()) << name;
  }
}

TEST(BusAddress, RejectsUnsafeNames) {
  for (const std::string& name :
       {std::string(), std::string("../etc"), std::string("a/b"), std::string("sp ace"), std::string(".hidden"),
        std::string("x\ny"), std::string(kMaxBusNameBytes + 1, 'a')}) {
    auto result = validateBusName(name);
    ASSERT_FALSE(result.has_value()) << "'" << name << "' was accepted";
    EXPECT_EQ(result.error().code, TransportError::InvalidBusName);
  }
}

TEST(BusAddress, IpcEndpointsLiveInThePrivateRuntimeFolder) {
  auto endpoints = resolveEndpoints("policy");
  ASSERT_TRUE(endpoints.has_value()) << endpoints.error().describe();
  const std::string dir = std::getenv("WSYNC_RUNTIME_DIR");
  EXPECT_EQ(endpoints->requests, "ipc://" + dir + "/policy.req");
  EXPECT_EQ(endpoints->events, "ipc://" + dir + "/policy.evt");
}

TEST(BusAddress, TcpEndpointsUsePortAndNextPort) {
  auto endpoints = resolveEndpoints("policy", "tcp://10.1.2.3:7400");
  ASSERT_TRUE(endpoints.has_value()) << endpoints.error().describe();
  EXPECT_EQ(endpoints->requests, "tcp://10.1.2.3:7400");
  EXPECT_EQ(endpoints->events, "tcp://10.1.2.3:7401");
}

TEST(BusAddress, RejectsMalformedTransports) {
  for (const char* transport : {"udp://x:1", "tcp://host", "tcp://:7400", "tcp://h:0", "tcp://h:65535", "tcp://h:70000",
                                "tcp://h:12ab", "inproc"}) {
    auto result = resolveEndpoints("policy", transport);
    ASSERT_FALSE(result.has_value()) << transport;
    EXPECT_EQ(result.error().code, TransportError::InvalidEndpoint) << transport;
  }
}

TEST(BusAddress, CreatesMissingRuntimeFolderPrivately) {
  const std::string dir = freshFolderName("created");
  ScopedEnv env("WSYNC_RUNTIME_DIR", dir);
  auto result = runtimeDirectory();
  ASSERT_TRUE(result.has_value()) << result.error().describe();
  struct stat info {};
  ASSERT_EQ(::stat(dir.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700U);
}

TEST(BusAddress, RefusesRuntimeFolderOpenToOthers) {
  const std::string dir = freshFolderName("open-to-all");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ScopedEnv env("WSYNC_RUNTIME_DIR", dir);
  auto result = runtimeDirectory();
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, TransportError::RuntimeDirUnsafe);
  EXPECT_NE(result.error().detail.find(dir), std::string::npos);
}

TEST(BusAddress, RefusesRuntimePathThatIsAFile) {
  const std::string path = freshFolderName("a-file");
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fclose(file);
  ScopedEnv env("WSYNC_RUNTIME_DIR", path);
  auto result = runtimeDirectory();
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, TransportError::RuntimeDirUnsafe);
}

TEST(BusAddress, SocketPathTooLongIsNamed) {
  const std::string dir = freshFolderName(std::string(80, 'd'));
  ScopedEnv env("WSYNC_RUNTIME_DIR", dir);
  auto result = resolveEndpoints("a-rather-long-bus-name-for-this-path");
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, TransportError::PathTooLong);
  EXPECT_NE(result.error().detail.find("WSYNC_RUNTIME_DIR"), std::string::npos);
}

}  // namespace
}  // namespace wsync::bus
