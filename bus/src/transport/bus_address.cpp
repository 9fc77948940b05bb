#include "wsync/bus/transport/bus_address.hpp"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace wsync::bus {
namespace {

bool isNameCharacter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// Creates `path` as 0700 if missing; accepts it only if it is a folder owned by us that nobody else can enter,
// because anyone who can reach the ipc sockets can talk to the coordinator.
tl::expected<std::string, TransportFailure> ensurePrivateDirectory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail(TransportError::RuntimeDirFailed, path + ": " + std::strerror(errno));
  }
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return fail(TransportError::RuntimeDirFailed, path + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(info.st_mode)) return fail(TransportError::RuntimeDirUnsafe, path + " is not a folder");
  if (info.st_uid != ::geteuid()) {
    return fail(TransportError::RuntimeDirUnsafe, path + " belongs to uid " + std::to_string(info.st_uid));
  }
  if ((info.st_mode & 077) != 0) {
    return fail(TransportError::RuntimeDirUnsafe, path + " is open to other users (mode must be 0700)");
  }
  return path;
}

}  // namespace

tl::expected<std::string, TransportFailure> validateBusName(std::string_view name) {
  if (name.empty()) return fail(TransportError::InvalidBusName, "the bus name is empty");
  if (name.size() > kMaxBusNameBytes) {
    return fail(TransportError::InvalidBusName,
                "'" + std::string(name) + "' is longer than " + std::to_string(kMaxBusNameBytes) + " characters");
  }
  if (name.front() == '.') return fail(TransportError::InvalidBusName, "'" + std::string(name) + "' starts with '.'");
  for (char c : name) {
    if (!isNameCharacter(c)) {
      return fail(TransportError::InvalidBusName, "'" + std::string(name) + "' has a character outside [A-Za-z0-9._-]");
    }
  }
  return std::string(name);
}

tl::expected<std::string, TransportFailure> runtimeDirectory() {
  if (const char* explicitDir = std::getenv("WSYNC_RUNTIME_DIR"); explicitDir != nullptr && *explicitDir != '\0') {
    return ensurePrivateDirectory(explicitDir);
  }
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0' && ::access(xdg, W_OK) == 0) {
    return ensurePrivateDirectory(std::string(xdg) + "/wsync");
  }
  return ensurePrivateDirectory("/tmp/wsync-" + std::to_string(::geteuid()));
}

tl::expected<BusEndpoints, TransportFailure> resolveEndpoints(std::string_view busName, std::string_view transport) {
  auto name = validateBusName(busName);
  if (!name) return tl::unexpected(name.error());

  if (transport.empty() || transport == "ipc") {
    auto dir = runtimeDirectory();
    if (!dir) return tl::unexpected(dir.error());
    const std::string base = *dir + "/" + *name;
    constexpr std::size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;
    if (base.size() + 4 > kMaxSocketPath) {
      return fail(TransportError::PathTooLong, base + ".req is longer than " + std::to_string(kMaxSocketPath) +
                                                   " bytes; set WSYNC_RUNTIME_DIR to a shorter folder");
    }
    return BusEndpoints{"ipc://" + base + ".req", "ipc://" + base + ".evt"};
  }

  constexpr std::string_view kTcp = "tcp://";
  if (transport.starts_with(kTcp)) {
    const std::string_view hostPort = transport.substr(kTcp.size());
    const std::size_t colon = hostPort.rfind(':');
    unsigned port = 0;
    if (colon != std::string_view::npos && colon > 0) {
      const std::string_view portText = hostPort.substr(colon + 1);
      auto [end, error] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
      // Events take PORT+1, so PORT must leave room for it.
      if (error == std::errc{} && end == portText.data() + portText.size() && port > 0 && port < 65535) {
        const std::string host(hostPort.substr(0, colon));
        return BusEndpoints{"tcp://" + host + ":" + std::to_string(port),
                            "tcp://" + host + ":" + std::to_string(port + 1)};
      }
    }
  }
  return fail(TransportError::InvalidEndpoint,
              "'" + std::string(transport) + "': use 'ipc' or tcp://HOST:PORT with 0 < PORT < 65535");
}

}  // namespace wsync::bus
