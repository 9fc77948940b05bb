#pragma once
// What carries a benchmark's traffic, for its report.
#include <string>

namespace wsync::bench {

// "eth0: veth, MTU 1500": the interface that holds IPv4 `address` in this network namespace, its driver (as ethtool
// names it) and MTU; "ADDRESS is on no interface here" when none holds it.
std::string describeInterfaceOf(const std::string& address);

}  // namespace wsync::bench
