#include "network_interface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>

namespace wsync::bench {
namespace {

// The name of the interface holding `address`, or empty.
std::string interfaceHolding(const std::string& address) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string name;
  for (const ifaddrs* entry = list; entry != nullptr && name.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    std::array<char, INET_ADDRSTRLEN> text{};
    const auto* inet = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if (::inet_ntop(AF_INET, &inet->sin_addr, text.data(), text.size()) != nullptr && address == text.data()) {
      name = entry->ifa_name;
    }
  }
  ::freeifaddrs(list);
  return name;
}

}  // namespace

std::string describeInterfaceOf(const std::string& address) {
  const std::string name = interfaceHolding(address);
  if (name.empty() || name.size() >= IFNAMSIZ) return address + " is on no interface here";
  const int probe = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return name;
  ifreq request{};
  std::memcpy(request.ifr_name, name.c_str(), name.size() + 1);
  ethtool_drvinfo driver{};
  driver.cmd = ETHTOOL_GDRVINFO;
  request.ifr_data = reinterpret_cast<char*>(&driver);
  std::string text = name + ": " + (::ioctl(probe, SIOCETHTOOL, &request) == 0 ? driver.driver : "driver unknown");
  if (::ioctl(probe, SIOCGIFMTU, &request) == 0) text += ", MTU " + std::to_string(request.ifr_mtu);
  ::close(probe);
  return text;
}

}  // namespace wsync::bench
