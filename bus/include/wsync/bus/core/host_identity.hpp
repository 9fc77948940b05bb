#pragma once
// Which host a process is on, as wsync needs to know it: whether two processes can share the coordinator's shared
// memory and see each other's pids. A hostname says neither (containers and network namespaces keep or change it
// independently of what they share), so the test is a key built from what sharing actually depends on: the boot,
// the /dev/shm mount and folder, and the pid namespace (docs/hosts.md).
#include <string>
#include <string_view>

namespace wsync::bus {

struct HostIdentity {
  std::string name;  // the hostname, for people (logs, refusals)
  std::string key;   // equal for two processes exactly when they share /dev/shm and pids
};

// This process's host, computed once.
const HostIdentity& thisHost();

// Whether a peer that reported `key` shares this process's shared memory and pids. An empty key (a peer that did not
// say) falls back to comparing `name` with this host's name, the rule before keys existed.
bool onThisHost(std::string_view key, std::string_view name);

}  // namespace wsync::bus
