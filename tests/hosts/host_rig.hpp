#pragma once
// Test support: several hosts on one machine (tests/hosts/rig.sh, docs/hosts-rig.md). Each host is a network
// namespace on a bridge private to the rig, with its own address, /dev/shm (a tmpfs of its own), runtime folder
// (WSYNC_RUNTIME_DIR) and hostname. A program started on a host sees only that host's shared memory and reaches the
// others over TCP only. The rig is removed when the object goes away, with whatever still runs on its hosts.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <tl/expected.hpp>
#include <wsync/cli/child_process.hpp>

namespace wsync::test {

class HostRig {
 public:
  // Why no rig can be made here (not root, iproute2 missing, namespaces refused as in an unprivileged container),
  // or nothing. Tests skip with it: GTEST_SKIP() << *reason. Asked once per process.
  static std::optional<std::string> unavailableReason();

  // A rig of these hosts, under a name no other test process uses. Its state is removed by a later rig.sh 'up' if
  // this process dies without removing it (its pid is the rig's owner).
  static tl::expected<HostRig, std::string> make(const std::vector<std::string>& hosts);

  HostRig(HostRig&& other) noexcept;
  HostRig& operator=(HostRig&& other) = delete;
  HostRig(const HostRig&) = delete;
  HostRig& operator=(const HostRig&) = delete;
  // Takes the rig down; a failure to do so fails the running test, naming what was left.
  ~HostRig();

  const std::string& name() const { return name_; }
  // The rig's hosts, in the order they were given.
  const std::vector<std::string>& hosts() const { return hosts_; }

  // The argv that runs `program` with `args` on `host`: argv[0] is the program to start (bash, running rig.sh). The
  // wrappers exec through, so the pid of what is started is the program's, and its signals reach the program.
  std::vector<std::string> command(const std::string& host, const std::string& program,
                                   const std::vector<std::string>& args = {}) const;
  // ChildProcess::spawn of command(): SIGKILL as the death signal unless `options` asks for another, so that
  // nothing on a host outlives a test process that was killed.
  cli::ChildProcess spawn(const std::string& host, const std::string& program, const std::vector<std::string>& args,
                          cli::ChildOptions options = {}) const;

  // The host's IPv4 address on the rig's network. Throws std::invalid_argument for a host the rig does not have.
  const std::string& address(const std::string& host) const;

  // Cuts (up = false) or restores the host's link: its port on the bridge goes down. Established connections are
  // not reset; their packets are dropped both ways until the link is back, as with a pulled cable.
  tl::expected<void, std::string> setLink(const std::string& host, bool up) const;

 private:
  HostRig(std::string name, std::vector<std::string> hosts, std::map<std::string, std::string> addresses)
      : name_(std::move(name)), hosts_(std::move(hosts)), addresses_(std::move(addresses)) {}

  std::string name_;  // empty once moved from
  std::vector<std::string> hosts_;
  std::map<std::string, std::string> addresses_;
};

}  // namespace wsync::test
